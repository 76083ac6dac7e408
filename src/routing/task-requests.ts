/**
 * §9 M2, routing: a `tools/call` answered with a task records the task's holder (eras/tasks.ts); a
 * request for a recorded task goes to its holder and nowhere else, from any instance; a task
 * whose holder is gone (R4) gets GW_TASK_LOST, never another replica; a task the store does not
 * hold goes to the balancer, as any modern request (it may be one the gateway never saw: created
 * before its record, or behind a fleet that shares task state).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ReplicaConfig } from '../config/schema.js';
import { describe, isStoreError } from '../errors.js';
import type { Forwarder, Forwarding, ForwardingPlan, ProxyDeps } from './forward.js';
import type { Respond } from './respond.js';
import type { TaskRecord } from '../store/types.js';
import { UpstreamAbort } from '../upstream/index.js';
import type { ModernMessage } from '../eras/classify.js';
import { shortTaskKey, taskKey, taskTtlMs, watchForTask, type CreatedTask } from '../eras/tasks.js';

type Route = (request: FastifyRequest, reply: FastifyReply, forwarding: ForwardingPlan) => Promise<unknown>;

export function createTaskRequests(deps: ProxyDeps, forwarder: Forwarder, respond: Respond, balanced: Route) {
  const { store, fleet, metrics, logger, answer } = deps;
  const { sendToOwner, reportStatus } = forwarder;

  /** Records the holder of a task a replica just created; the answer passes whatever happens. */
  async function recordTask(replica: ReplicaConfig, task: CreatedTask): Promise<void> {
    const key = taskKey(task.taskId);
    try {
      const ownerEpoch = await fleet.bindingEpoch(replica.id);
      const bound = await store.bindTask(key, { owner: replica.id, ownerEpoch }, taskTtlMs(task.ttlMs, deps.config().tasks.maxTtlMs));
      if (bound) {
        metrics.tasks.inc({ outcome: 'recorded' });
        return;
      }
      logger.error({ replica: replica.id, task: shortTaskKey(key) }, 'replica issued a task id that is already recorded; requests for it go to the first holder');
    } catch (err) {
      // A store failure is expected in an outage (§7); anything else is a fault in the gateway.
      logger[isStoreError(err) ? 'warn' : 'error']({ err: describe(err), replica: replica.id, task: shortTaskKey(key) }, 'cannot record the task: requests for it go to the balancer');
    }
    metrics.tasks.inc({ outcome: 'unrecorded' });
  }

  /** A modern tools/call: its answer is watched for a task to record. */
  function toolCall(message: ModernMessage, forwarding: ForwardingPlan): ForwardingPlan {
    const maxEventBytes = deps.config().limits.sseEventBytes;
    return {
      ...forwarding,
      watch: (response, replica) => watchForTask(response, message.id, maxEventBytes, (task) => recordTask(replica, task)),
    };
  }

  function lost(request: FastifyRequest, reply: FastifyReply, key: string, record: TaskRecord, why: string, id: ModernMessage['id']) {
    metrics.tasks.inc({ outcome: 'lost' });
    logger.info({ task: shortTaskKey(key), replica: record.owner, why }, 'task lost');
    return answer(request, reply, 'GW_TASK_LOST', { id });
  }

  /** A request for a task (`taskId` from its params): to its holder, or to the balancer when none is recorded. */
  async function taskRequest(request: FastifyRequest, reply: FastifyReply, forwarding: ForwardingPlan, message: ModernMessage, taskId: string) {
    const key = taskKey(taskId);
    let record: TaskRecord | null;
    let gone: boolean;
    try {
      record = await store.readTask(key);
      gone = record !== null && (await fleet.ownerGone(record));
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    if (record === null) {
      metrics.tasks.inc({ outcome: 'unknown' });
      return balanced(request, reply, forwarding);
    }
    const replica = fleet.get(record.owner);
    if (!replica || gone) return lost(request, reply, key, record, replica ? 'holder gone' : 'holder removed from the configuration', message.id);
    if (fleet.health(record.owner) === 'suspect') {
      // R4: a misbehaving holder keeps its tasks; the client retries once it answers again.
      return answer(request, reply, 'GW_REPLICA_SUSPECT', { detail: record.owner });
    }
    const attempt: Forwarding = { ...forwarding, replica, sessionId: undefined };
    const abort = new UpstreamAbort();
    // Never retried elsewhere: no other replica holds the task.
    const response = await sendToOwner(request, reply, attempt, abort, () =>
      // R4: nothing listens where the holder was; its tasks, held in its memory, are gone.
      lost(request, reply, key, record, 'holder refused the connection', message.id),
    );
    if (response === undefined) return;
    reportStatus(record.owner, response.statusCode);
    metrics.tasks.inc({ outcome: 'routed' });
    return respond(request, reply, attempt, response, abort);
  }


  return { toolCall, taskRequest };
}
