/**
 * Properties of the era classifier (src/eras/classify.ts): no method, headers or body make it
 * throw; what it calls modern is a message that makes the claim; only a header that is there can
 * disagree; and a disagreement about a task never shows the task id (§9 M2).
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { classify, decodeName, PROTOCOL_VERSION_META_KEY } from '../../src/eras/classify.js';
import { property, type NamedProperty } from '../helpers/property.js';

const MODERN = '2026-07-28';
const METHODS = ['initialize', 'tools/call', 'tools/list', 'prompts/get', 'resources/read', 'tasks/get', 'tasks/update', 'tasks/cancel', 'ping', 'notifications/cancelled'];
/** Task ids that no message text contains by chance. */
const taskIdArb = fc.stringMatching(/^TID[0-9a-f]{6}$/);
const base64Name = (s: string): string => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;

const versionArb = fc.oneof(fc.constantFrom(MODERN, '2025-11-25', '2027-01-01', ''), fc.string({ maxLength: 12 }), fc.anything());
const metaArb = fc.oneof(
  fc.record({ [PROTOCOL_VERSION_META_KEY]: versionArb }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
  fc.anything({ maxDepth: 1 }),
);
const paramsArb = fc.oneof(
  fc.record(
    { _meta: metaArb, name: fc.oneof(fc.string({ maxLength: 8 }), fc.anything({ maxDepth: 0 })), uri: fc.string({ maxLength: 8 }), taskId: taskIdArb },
    { requiredKeys: [] },
  ),
  fc.anything({ maxDepth: 1 }),
);
const messageArb = fc.record(
  {
    jsonrpc: fc.constantFrom('2.0', '1.0'),
    id: fc.oneof(fc.nat(), fc.string({ maxLength: 4 }), fc.constant(null), fc.anything({ maxDepth: 0 })),
    method: fc.oneof(fc.constantFrom(...METHODS), fc.string({ maxLength: 10 }), fc.anything({ maxDepth: 0 })),
    params: paramsArb,
  },
  { requiredKeys: [] },
);

/** Bodies: JSON messages (with and without the claim, in batches, with the slash escaped), broken JSON, any bytes, no Buffer at all. */
const bodyArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: messageArb.map((m) => Buffer.from(JSON.stringify(m))) },
  messageArb.map((m) => Buffer.from(JSON.stringify(m).replaceAll('/', '\\/'))),
  fc.array(messageArb, { maxLength: 3 }).map((ms) => Buffer.from(JSON.stringify(ms))),
  fc.tuple(messageArb, fc.nat()).map(([m, n]) => {
    const text = JSON.stringify(m);
    return Buffer.from(`${text.slice(0, n % (text.length + 1))}protocolVersion`);
  }),
  fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.concat([Buffer.from(b), Buffer.from('protocolVersion')])),
  fc.anything({ maxDepth: 1 }),
);

const headerArb = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.constantFrom(MODERN, ` ${MODERN}\t`, 'tools/call', 'x', '=?base64?', '=?base64?!!?=', base64Name('x'), '=?base64?/w==?='),
  taskIdArb,
  taskIdArb.map(base64Name),
  fc.array(fc.string({ maxLength: 8 }), { maxLength: 2 }),
  fc.constant(undefined),
);
const headersArb = fc.record(
  { 'mcp-protocol-version': headerArb, 'mcp-method': headerArb, 'mcp-name': headerArb, 'content-type': fc.constant('application/json') },
  { requiredKeys: [] },
);

const caseArb = fc.record({ method: fc.constantFrom('POST', 'GET', 'DELETE', 'post', 'PUT'), headers: headersArb, body: bodyArb });

export const classifyProperties: readonly NamedProperty[] = [
  property(
    'no input makes it throw; modern is a POST message that makes the claim, and only a header that is there disagrees',
    caseArb,
    ({ method, headers, body }) => {
      const era = classify(method, headers, body);
      assert.deepStrictEqual(classify(method, headers, body), era, 'the same answer twice');
      if (era.kind === 'legacy') return;
      assert.equal(method, 'POST');
      assert.ok(Buffer.isBuffer(body));
      const parsed = JSON.parse(body.toString('utf8')) as { method: unknown; params: { _meta: Record<string, unknown> } };
      assert.equal(parsed.method, era.message.method);
      assert.ok(PROTOCOL_VERSION_META_KEY in parsed.params._meta, 'the claim is in the body');
      if (era.kind === 'modern') return;
      const named = Object.entries(headers).filter(([name, value]) => name.startsWith('mcp-') && value !== undefined && !(Array.isArray(value) && value.length === 0));
      assert.ok(named.length > 0, 'a disagreement needs a header');
      assert.ok(era.why.length > 0 && typeof era.header === 'string');
      const taskId = era.message.params['taskId'];
      if (typeof taskId === 'string' && era.message.method.startsWith('tasks/') && /Mcp-Name/.test(era.why)) {
        for (const secret of [taskId, ...named.flatMap(([, v]) => (Array.isArray(v) ? v : [v]))].filter((s): s is string => typeof s === 'string' && /TID/.test(s))) {
          assert.ok(!era.why.includes(secret) && !era.header.includes(secret), 'a task id is never shown');
        }
      }
    },
    { numRuns: 500 },
  ),
  property(
    'Mcp-Name: any value decodes or is refused without throwing; a plain value is itself, a Base64 sentinel of any text that text',
    fc.tuple(fc.string({ maxLength: 24 }), fc.string({ unit: 'grapheme', maxLength: 12 })),
    ([raw, text]) => {
      const decoded = decodeName(raw);
      assert.ok(decoded === undefined || typeof decoded === 'string');
      if (!(raw.startsWith('=?base64?') && raw.endsWith('?='))) assert.equal(decoded, raw, 'a plain value is itself');
      assert.equal(decodeName(base64Name(text)), text);
    },
    { numRuns: 300 },
  ),
];
