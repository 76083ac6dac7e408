/**
 * The conformance suite's 2026-07-28 server scenarios, directly and through the gateway, on the
 * SDK v2, stateless (§9 M1): any replica takes any request, a multi-round (`input_required`) call
 * is retried on whichever replica the balancer picks (its signed `requestState` holds for the
 * fleet), and a `subscriptions/listen` stream held by one replica hears of a list change made
 * through the other (the fixture's fleet-wide bus, server-main.ts).
 */
import t from 'tap';
import { directAndThroughGateway } from './compare.js';

// A limit on failure, not an expected duration: two runs of some 50 scenarios on a loaded machine.
t.setTimeout(300_000);

t.test('2026-07-28: what passes directly passes through the gateway', (t) =>
  directAndThroughGateway(t, {
    era: '2026',
    revision: '2026-07-28',
    // Unscored ones: the Tasks extension (the fixture keeps no tasks), JSON Schema 2020-12 and
    // x-mcp-header tools, which the fixture does not have.
    failingDirectly: [
      'tasks-lifecycle',
      'tasks-capability-negotiation',
      'tasks-wire-fields',
      'tasks-request-state-removal',
      'tasks-mrtr-input',
      'tasks-request-headers',
      'tasks-dispatch-and-envelope',
      'tasks-required-task-error',
      'tasks-mrtr-composition',
      'json-schema-2020-12',
      'http-custom-header-server-validation',
    ],
  }),
);
