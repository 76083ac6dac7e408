/**
 * The conformance suite's 2025-11-25 server scenarios, directly and through the gateway, on the
 * SDK v1 with sessions: the gateway's sticky routing (§3), server-to-client requests (sampling,
 * elicitation) on a call's stream, and several streams of one session at once.
 */
import t from 'tap';
import { directAndThroughGateway } from './compare.js';

// A limit on failure, not an expected duration: two runs of some 30 scenarios on a loaded machine.
t.setTimeout(300_000);

t.test('2025-11-25: what passes directly passes through the gateway', (t) =>
  directAndThroughGateway(t, {
    era: '2025',
    revision: '2025-11-25',
    // No tools for the two elicitation-schema scenarios nor for JSON Schema 2020-12;
    // server-sse-polling is pending upstream (its own reference server fails it).
    failingDirectly: ['elicitation-sep1034-defaults', 'elicitation-sep1330-enums', 'json-schema-2020-12', 'server-sse-polling'],
  }),
);
