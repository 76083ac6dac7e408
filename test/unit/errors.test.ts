/**
 * The code registry against the code base and docs/errors.md, both ways: every code the page lists
 * is raised somewhere in src/, and every GW_* code that src/ raises is in the registry (and so, by
 * test/config/reference.test.ts, on the page). And each answer is built as CONTRACT.md fixes it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { sectionOf } from '../../src/config/reference.js';
import { ERROR_CODES, type AnswerCode } from '../../src/errors.js';
import { answerFor, GATEWAY_ERROR_HEADER } from '../../src/answers.js';
import { notResumed, outcomeUnknownError, streamResetNotification } from '../../src/resumption/signal.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const REGISTRY = join('src', 'errors.ts');

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** Where each GW_* code appears in src/, outside the registry's own entries. */
function raisedCodes(): Map<string, string[]> {
  const raised = new Map<string, string[]>();
  for (const path of sources('src')) {
    // Comments name codes without raising them.
    let text = readFileSync(join(ROOT, path), 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/^\s*\/\/.*$/gm, '');
    // The registry names every code as a key: that is a definition, not a use.
    if (path === REGISTRY) text = text.replace(/^ {2}GW_[A-Z_]+: \{/gm, '');
    for (const [code] of text.matchAll(/\bGW_[A-Z_]+\b/g)) raised.set(code, [...(raised.get(code) ?? []), path]);
  }
  return raised;
}

t.test('every code docs/errors.md lists is raised in src/, and every code raised is listed', async (t) => {
  const page = readFileSync(join(ROOT, 'docs', 'errors.md'), 'utf8');
  const documented = [...sectionOf(page, 'errors').matchAll(/^\| `(GW_[A-Z_]+)` \|/gm)].map((m) => m[1] as string);
  const raised = raisedCodes();
  t.ok(documented.length > 0, 'the page lists codes');
  for (const code of documented) t.ok(raised.has(code), `${code} is raised somewhere (${raised.get(code)?.join(', ') ?? 'nowhere'})`);
  for (const [code, where] of raised) t.ok(documented.includes(code), `${code}, raised in ${where.join(', ')}, is documented`);
  t.strictSame(new Set(documented), new Set(Object.keys(ERROR_CODES)), 'the page and the registry hold the same codes');
});

t.test('an answer whose body CONTRACT.md fixes keeps it byte for byte; its code is in the header', async (t) => {
  const notFound = answerFor('GW_SESSION_NOT_FOUND', { retryAfterSeconds: 1 });
  t.equal(notFound.status, 404);
  t.equal(notFound.body, '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
  t.strictSame(notFound.headers, { 'content-type': 'application/json', [GATEWAY_ERROR_HEADER]: 'GW_SESSION_NOT_FOUND' });

  const reject = answerFor('GW_NOT_RESUMABLE', { retryAfterSeconds: 1, data: notResumed('gap') });
  t.equal(reject.status, 410);
  t.equal(
    reject.body,
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32010,"message":"Last-Event-ID cannot be resumed; reconnect without it","data":{"resumed":false,"reason":"gap"}}}',
  );
  t.equal(reject.headers[GATEWAY_ERROR_HEADER], 'GW_NOT_RESUMABLE');

  t.equal(
    outcomeUnknownError(7, 'owner_gone'),
    '{"jsonrpc":"2.0","id":7,"error":{"code":-32010,"message":"Stream not resumable; the request\'s outcome is unknown","data":{"resumed":false,"reason":"owner_gone"}}}',
  );
  t.equal(
    streamResetNotification('superseded', 'a\u0001b'),
    '{"jsonrpc":"2.0","method":"notifications/gateway/stream_reset","params":{"resumed":false,"reason":"superseded","lastEventId":"a?b"}}',
  );
});

t.test('every other answer carries its code in error.data and in the header', async (t) => {
  const httpAnswers = (Object.keys(ERROR_CODES) as (keyof typeof ERROR_CODES)[]).filter((code): code is AnswerCode => {
    const spec = ERROR_CODES[code] as { status?: number; rpc?: unknown; fixed?: boolean };
    return spec.status !== undefined && typeof spec.rpc === 'number' && !spec.fixed;
  });
  t.ok(httpAnswers.length >= 8, 'the answers without a fixed body');
  for (const code of httpAnswers) {
    const answer = answerFor(code, { retryAfterSeconds: 3, detail: 'r1' });
    const body = JSON.parse(answer.body) as { jsonrpc: string; id: null; error: { code: number; message: string; data: { code: string } } };
    t.equal(body.error.data.code, code, `${code}: error.data.code`);
    t.equal(answer.headers[GATEWAY_ERROR_HEADER], code, `${code}: header`);
    t.equal(body.id, null);
    t.notMatch(body.error.message, '%s', `${code}: the message is filled`);
    t.equal(answer.headers['retry-after'], answer.status === 503 ? '3' : undefined, `${code}: Retry-After on 503 only`);
  }
  const suspect = JSON.parse(answerFor('GW_REPLICA_SUSPECT', { retryAfterSeconds: 1, detail: 'r2' }).body) as { error: { message: string } };
  t.equal(suspect.error.message, 'Service temporarily unavailable: replica r2 is not answering properly');
  t.equal(answerFor('GW_BAD_REQUEST', { retryAfterSeconds: 1, status: 415, detail: 'x' }).status, 415, 'a 4xx of its own');
});
