/**
 * JSON-lines logger on stdout. Secrets never reach a log line: the paths below are censored
 * wherever they appear, and the store URL is logged without its password (see redactUrl).
 */
import { pino, type Logger, type LevelWithSilent, type DestinationStream } from 'pino';

export type { Logger };

const REDACT = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  'config.cursor.secret',
  'config.store.url',
  'secret',
];

export function createLogger(level: LevelWithSilent, destination?: DestinationStream): Logger {
  const options = { level, base: { service: 'mcp-resume-gateway' }, redact: { paths: REDACT, censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
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
