import t from 'tap';
import { classify, decodeName, methodLabel } from '../../src/eras/classify.js';
import { checkProperties } from '../helpers/property.js';
import { classifyProperties } from './classify.properties.js';

const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const body = (value: unknown) => Buffer.from(JSON.stringify(value));

t.test('modern is the body’s claim, as the SDK v2 classifies', async (t) => {
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', _meta: META } };
  t.match(classify('POST', {}, body(call)), { kind: 'modern', message: { method: 'tools/call', id: 1 } }, 'a request with the claim');
  t.match(classify('POST', {}, body({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { _meta: META } })), { kind: 'modern', message: { id: null } }, 'a notification with the claim');
  t.match(classify('POST', {}, Buffer.from(JSON.stringify(call).replace('/protocolVersion', '\\/protocolVersion'))), { kind: 'modern' }, 'an escaped slash in the key');
  t.match(classify('POST', {}, body({ ...call, method: 'initialize', params: { _meta: META } })), { kind: 'modern' }, 'initialize with a modern claim');
});

t.test('everything else is legacy, parsed only when it may carry the claim', async (t) => {
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {} } };
  t.same(classify('POST', {}, body(initialize)), { kind: 'legacy', parsed: initialize }, 'initialize: legacy, and its parse is kept');
  t.same(classify('POST', {}, body({ jsonrpc: '2.0', id: 2, method: 'tools/list' })), { kind: 'legacy' }, 'no claim in the bytes: not parsed');
  const old = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2025-06-18' } } };
  t.match(classify('POST', {}, body(old)), { kind: 'legacy' }, 'initialize whose claim names an old revision');
  t.match(classify('POST', { 'mcp-method': 'x' }, body([{ jsonrpc: '2.0', id: 1, method: 'ping', params: { _meta: META } }])), { kind: 'legacy' }, 'a batch (the replica refuses a modern one)');
  t.same(classify('POST', {}, Buffer.from('{"protocolVersion": nope')), { kind: 'legacy' }, 'not JSON: the replica answers it');
  t.same(classify('GET', {}, undefined), { kind: 'legacy' }, 'GET');
  t.same(classify('DELETE', {}, undefined), { kind: 'legacy' }, 'DELETE');
});

t.test('headers that disagree with the body; absent ones agree', async (t) => {
  const call = body({ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'weather', _meta: META } });
  t.match(classify('POST', {}, call), { kind: 'modern' }, 'no headers');
  t.match(classify('POST', { 'mcp-name': '=?base64?d2VhdGhlcg==?=' }, call), { kind: 'modern' }, 'Mcp-Name in Base64');
  t.match(classify('POST', { 'mcp-name': 'news' }, call), { kind: 'mismatch', message: { id: 'a' }, header: 'news', why: /params\.name="weather".*"news"/ });
  t.match(classify('POST', { 'mcp-method': 'tools/list' }, call), { kind: 'mismatch' });
  t.match(classify('POST', { 'mcp-protocol-version': '2025-11-25' }, call), { kind: 'mismatch' });
  const list = body({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: META } });
  t.match(classify('POST', { 'mcp-name': 'anything' }, list), { kind: 'modern' }, 'Mcp-Name on a method it does not mirror is not compared');
});

t.test('Mcp-Name decoding and bounded method labels', async (t) => {
  t.equal(decodeName('plain'), 'plain');
  t.equal(decodeName(`=?base64?${Buffer.from('naïve').toString('base64')}?=`), 'naïve');
  t.equal(decodeName('=?base64?not base64?='), undefined);
  t.equal(decodeName(`=?base64?${Buffer.from([0xff, 0xfe]).toString('base64')}?=`), undefined, 'not UTF-8');
  t.equal(methodLabel('tools/call'), 'tools/call');
  t.equal(methodLabel('x/anything-a-client-makes-up'), 'other');
});

checkProperties(t, classifyProperties);
