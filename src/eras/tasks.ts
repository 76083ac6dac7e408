/**
 * Task affinity (CONTRACT.md §9 M2, the Tasks extension SEP-2663): a task of the 2026-07-28 era
 * lives in the memory of the replica that created it, so every later request for it must reach
 * that replica. The gateway learns the holder from the `tools/call` answer that returns the task
 * (`result.resultType == "task"`), as JSON or inside a POST's SSE stream, and records it in the
 * store before that answer reaches the client, so that the client's next request finds it through
 * any instance.
 *
 * A task id is a bearer secret (the spec requires it to be unguessable): the store holds a digest
 * of it, and logs name that digest's first characters, never the id.
 */
import { createHash } from 'node:crypto';
import { Transform, pipeline, type Readable } from 'node:stream';
import { SseParser } from '../sse/parser.js';
import { isEventStream, type UpstreamResponse } from '../upstream/index.js';
import { isObject, type ModernMessage } from './classify.js';

/** The requests that name a task in `params.taskId` and must reach its holder. */
const TASK_METHODS = new Set(['tasks/get', 'tasks/update', 'tasks/cancel', 'tasks/result']);

/** The task id of a request that names one; undefined for any other request. */
export function requestedTask(message: ModernMessage): string | undefined {
  if (!TASK_METHODS.has(message.method)) return undefined;
  const taskId = message.params['taskId'];
  return typeof taskId === 'string' && taskId !== '' ? taskId : undefined;
}

/** The store's key of a task: a digest, so that a dump of the store does not hand out task ids. */
export function taskKey(taskId: string): string {
  return createHash('sha256').update('mcp-gateway task\0').update(taskId).digest('base64url');
}

/** Enough of a task's key to follow it through the logs; the key itself reveals nothing. */
export function shortTaskKey(key: string): string {
  return key.slice(0, 8);
}

/** A task is remembered at least this long: a shorter ttlMs would expire before the first poll. */
const MIN_TASK_TTL_MS = 1000;

/**
 * How long the holder is remembered: the task's own ttlMs, bounded by tasks.maxTtlMs. A null
 * ttlMs means the replica keeps the task without a limit: it is remembered for the bound, as a
 * missing or malformed one is.
 */
export function taskTtlMs(ttlMs: unknown, maxTtlMs: number): number {
  if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs)) return maxTtlMs;
  return Math.min(maxTtlMs, Math.max(MIN_TASK_TTL_MS, Math.ceil(ttlMs)));
}

export interface CreatedTask {
  readonly taskId: string;
  readonly ttlMs: unknown;
}

/** The task a JSON-RPC message creates: the result of request `id` with `resultType: "task"`. */
export function createdTask(message: unknown, id: string | number | null): CreatedTask | undefined {
  if (!isObject(message) || message['id'] !== id) return undefined;
  const result = message['result'];
  if (!isObject(result) || result['resultType'] !== 'task') return undefined;
  const taskId = result['taskId'];
  return typeof taskId === 'string' && taskId !== '' ? { taskId, ttlMs: result['ttlMs'] } : undefined;
}

/**
 * A JSON answer larger than this is passed on without being read: an answer that creates a task
 * is a few hundred bytes, and holding a large tool result back until its end would delay it.
 */
const TASK_ANSWER_MAX_BYTES = 64 * 1024;

/**
 * The replica's answer to a `tools/call`, with its body watched for a task: when the answer
 * creates one, `onTask` runs, and the bytes that carry the task wait for it (it must not reject).
 * A JSON answer is held until it ends (up to TASK_ANSWER_MAX_BYTES), an SSE answer until the event
 * that carries the response; everything before and after passes at once.
 */
export function watchForTask(
  response: UpstreamResponse,
  id: string | number | null,
  maxEventBytes: number,
  onTask: (task: CreatedTask) => Promise<void>,
): UpstreamResponse {
  if (response.statusCode !== 200) return response;
  const watcher = isEventStream(response) ? sseWatcher(id, maxEventBytes, onTask) : jsonWatcher(id, onTask);
  // An error on either side ends both: the relay sees the watcher fail as it would the body.
  const body = pipeline(response.body, watcher, () => undefined) as Readable;
  return { ...response, body } as UpstreamResponse;
}

function jsonWatcher(id: string | number | null, onTask: (task: CreatedTask) => Promise<void>): Transform {
  const held: Buffer[] = [];
  let bytes = 0;
  let passing = false;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      if (passing) return done(null, chunk);
      held.push(chunk);
      bytes += chunk.length;
      if (bytes > TASK_ANSWER_MAX_BYTES) {
        passing = true;
        return done(null, Buffer.concat(held.splice(0)));
      }
      done();
    },
    flush(done) {
      if (passing) return done();
      const body = Buffer.concat(held.splice(0));
      const task = body.includes('"task"') ? createdTask(parseJson(body.toString('utf8')), id) : undefined;
      if (task === undefined) return done(null, body);
      void onTask(task).then(() => done(null, body));
    },
  });
}

function sseWatcher(id: string | number | null, maxEventBytes: number, onTask: (task: CreatedTask) => Promise<void>): Transform {
  let watching = true;
  let found: CreatedTask | undefined;
  const parser = new SseParser(
    (item) => {
      if (!watching) return;
      if (item.kind === 'error') {
        // The rewriter downstream ends the stream on the same event.
        watching = false;
        return;
      }
      if (item.kind !== 'event' || item.data === undefined || !(item.data.includes('"result"') || item.data.includes('"error"'))) return;
      const message = parseJson(item.data);
      if (!isObject(message) || message['id'] !== id) return;
      // The response to the call: nothing after it can create the task.
      watching = false;
      found = createdTask(message, id);
    },
    { maxEventBytes },
  );
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      if (!watching) return done(null, chunk);
      parser.push(chunk);
      const task = found;
      found = undefined;
      if (task === undefined) return done(null, chunk);
      void onTask(task).then(() => done(null, chunk));
    },
  });
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
