/**
 * JSON-lines logger on stdout (CONTRACT.md §1). No secret reaches a log line, at any level, in any
 * encoding. Three layers, because a secret can hide in more than one place:
 * - every logged object is rebuilt before it is written (see `sanitize`): header-like and
 *   secret-like keys are censored wherever they are nested, bytes are never written (a raw packet
 *   as a byte array is a whole request, Authorization included), and errors keep only their type,
 *   code, message and cause (never the properties that libraries hang on them, such as Node's
 *   `rawPacket`);
 * - the written line is scrubbed of every secret the gateway knows (the cursor secret, store
 *   passwords: see `LogSecrets`) and of every `Bearer` / `Basic` credential;
 * - the store URL is logged through redactUrl, and a session only as its keyed fingerprint
 *   (SessionFingerprint), never its id or a part of it.
 */
import { pino, type DestinationStream, type LevelWithSilent, type Logger } from 'pino';
import type { Config } from './config/schema.js';

export type { Logger };

const CENSORED = '[redacted]';
/** Keys whose values are never written, at any depth (compared in lower case). */
const SECRET_KEYS = new Set(['authorization', 'proxy-authorization', 'cookie', 'set-cookie', 'password', 'secret', 'token', 'rawpacket']);
/** Credentials in free text (an error message quoting a header, a URL in a message). */
const CREDENTIAL = /\b(Bearer|Basic)(\s+|\\t)[^\s"',;]+/gi;
const URL_PASSWORD = /(\b[a-z][a-z0-9+.-]*:\/\/[^\s/:@"]*:)[^\s/@"]+@/gi;
/** Nested objects deeper than this are summarised: log objects are small and flat. */
const MAX_DEPTH = 6;
/** Secrets shorter than this would censor ordinary words; the configuration enforces far longer. */
const MIN_SECRET_CHARS = 6;

/**
 * The secrets the gateway knows, scrubbed from every written line: in clear, JSON-escaped,
 * base64, base64url and hex (an encoded secret is still the secret).
 */
export class LogSecrets {
  readonly #forms = new Set<string>();

  add(secret: string | undefined): void {
    if (secret === undefined || secret.length < MIN_SECRET_CHARS) return;
    const bytes = Buffer.from(secret, 'utf8');
    for (const form of [secret, JSON.stringify(secret).slice(1, -1), bytes.toString('base64'), bytes.toString('base64url'), bytes.toString('hex')]) {
      this.#forms.add(form);
    }
  }

  /** The passwords in a store URL (any of redis://user:password@host). */
  addUrlPassword(url: string | undefined): void {
    if (url === undefined || !URL.canParse(url)) return;
    const { password } = new URL(url);
    if (password !== '') {
      this.add(password);
      this.add(decodeURIComponent(password));
    }
  }

  /** Every secret a configuration holds: the cursor secrets and the store's passwords. */
  addConfig(config: Pick<Config, 'cursor' | 'store'>): void {
    for (const secret of [config.cursor.secret, ...(config.cursor.previousSecrets ?? [])]) this.add(secret);
    const { store } = config;
    for (const url of [store.url, ...(store.cluster?.nodes ?? []), ...(store.sentinel?.nodes ?? [])]) this.addUrlPassword(url);
  }

  scrub(line: string): string {
    let out = line.replace(CREDENTIAL, `$1 ${CENSORED}`).replace(URL_PASSWORD, `$1${CENSORED}@`);
    for (const form of this.#forms) if (out.includes(form)) out = out.split(form).join(CENSORED);
    return out;
  }
}

export interface LoggerOptions {
  destination?: DestinationStream;
  secrets?: LogSecrets;
}

export function createLogger(level: LevelWithSilent, options: LoggerOptions = {}): Logger {
  const secrets = options.secrets ?? new LogSecrets();
  const settings = {
    level,
    base: { service: 'mcp-resume-gateway' },
    formatters: { log: (object: Record<string, unknown>) => sanitize(object, 0) as Record<string, unknown> },
    // What sanitize made of an error is final: pino's own serializer would copy it back whole.
    serializers: { err: (value: unknown) => value },
    hooks: { streamWrite: (line: string) => secrets.scrub(line) },
  };
  return options.destination ? pino(settings, options.destination) : pino(settings);
}

/**
 * stdout as the logger's destination, written asynchronously: a line never blocks the event loop
 * on a slow reader of stdout, and lines logged while a write is under way leave together in the
 * next. pino writes what is left synchronously at exit; `flushLog` waits for it before a planned
 * exit (SIGTERM, SIGINT), so that nothing logged is lost.
 */
export type LogDestination = ReturnType<typeof pino.destination>;

export function stdoutDestination(): LogDestination {
  // minLength 1: every line is written as soon as the previous write is done (nothing waits for
  // more), and flush(cb) calls back once everything is written, not at once as with 0.
  return pino.destination({ dest: 1, sync: false, minLength: 1 });
}

/** Resolves once every line given to `destination` is written. */
export function flushLog(destination: LogDestination): Promise<void> {
  // The callback's error is fsync's, which a pipe refuses (EINVAL): the lines are written by then.
  return new Promise((resolve) => destination.flush(() => resolve()));
}

/** A URL fit for a log line: any password is replaced. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = 'redacted';
    return parsed.toString();
  } catch {
    return '[unparseable url]';
  }
}

/**
 * How a session is named in a log line or a span: its keyed fingerprint (CursorKeys
 * sessionFingerprint), the same on every instance of a deployment, from which the id cannot be
 * had; undefined while the instance has no cursor key yet (the field is then left out).
 */
export type SessionFingerprint = (sessionId: string) => string | undefined;

/** A copy of a logged value with nothing secret or raw left in it. */
export function sanitize(value: unknown, depth: number): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (depth >= MAX_DEPTH) return '[nested too deep]';
  if (value instanceof Error) return sanitizeError(value, depth);
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return `[${value.byteLength} bytes]`;
  if (Array.isArray(value)) return value.map((item) => sanitize(item, depth + 1));
  if (value instanceof Date) return value.toISOString();
  if (value instanceof URL) return redactUrl(value.toString());
  const proto = Object.getPrototypeOf(value) as unknown;
  // Sockets, requests and other live objects carry buffers and headers: never walked.
  if (proto !== Object.prototype && proto !== null) return `[${(value as object).constructor?.name ?? 'object'}]`;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    out[key] = SECRET_KEYS.has(key.toLowerCase()) && child !== undefined ? CENSORED : sanitize(child, depth + 1);
  }
  return out;
}

/**
 * An error as a log line shows it: type, code, message and cause, each said once. The stack only
 * for an error without a code, outside any error with one: a code names an expected condition (a
 * timeout, a refused connection, a store failure), and its stack, or its causes', says nothing an
 * operator can use.
 */
function sanitizeError(err: Error, depth: number, expected = false): Record<string, unknown> {
  const code = (err as { code?: unknown }).code;
  const out: Record<string, unknown> = { type: err.name, message: err.message };
  if (typeof code === 'string' || typeof code === 'number') out['code'] = code;
  const named = expected || out['code'] !== undefined;
  const cause = err.cause;
  if (cause !== undefined) {
    const inner = cause instanceof Error && depth + 1 < MAX_DEPTH ? sanitizeError(cause, depth + 1, named) : sanitize(cause, depth + 1);
    // A message that already ends with its cause's message (StoreError does) need not say it twice.
    const innerMessage = typeof inner === 'object' && inner !== null ? (inner as { message?: unknown }).message : undefined;
    out['cause'] = typeof innerMessage === 'string' && err.message.endsWith(innerMessage) ? omitMessage(inner as Record<string, unknown>) : inner;
  }
  if (!named && err.stack) out['stack'] = err.stack;
  return out;
}

function omitMessage(error: Record<string, unknown>): Record<string, unknown> {
  const { message: _said, ...rest } = error;
  return rest;
}
