import t from 'tap';
import { parsedRequestIds, requestIds, responseIds } from '../../src/jsonrpc.js';

const body = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8');

t.test('requestIds: the ids of the requests in a POST body, one message or a batch', async (t) => {
  t.same(requestIds(body({ jsonrpc: '2.0', id: 7, method: 'tools/call' })), [7]);
  t.same(
    requestIds(
      body([
        { jsonrpc: '2.0', id: 'a', method: 'tools/call' },
        { jsonrpc: '2.0', method: 'notifications/initialized' },
        { jsonrpc: '2.0', id: 'b', result: {} },
        { jsonrpc: '2.0', id: null, method: 'ping' },
        { jsonrpc: '2.0', id: 2, method: 'ping' },
      ]),
    ),
    ['a', 2],
    'notifications, responses and ids that are neither strings nor numbers are left out',
  );
  t.same(requestIds(Buffer.from('{"id": 1, "method":', 'utf8')), [], 'not JSON: none');
  t.same(requestIds(undefined), [], 'no body: none');
  t.same(requestIds({ id: 1, method: 'ping' }), [], 'only the raw bytes are read');
  t.same(parsedRequestIds([{ jsonrpc: '2.0', id: 1, method: 'initialize' }, { jsonrpc: '2.0', id: 2, result: {} }]), [1], 'from a parsed body, the same');
});

t.test('responseIds: the ids of the responses (result or error) in an event', async (t) => {
  t.same(responseIds(JSON.stringify({ jsonrpc: '2.0', id: 3, result: { content: [] } })), [3]);
  t.same(responseIds(JSON.stringify({ jsonrpc: '2.0', id: 'x', error: { code: -32000, message: 'no' } })), ['x']);
  t.same(
    responseIds(
      JSON.stringify([
        { jsonrpc: '2.0', id: 1, result: {} },
        { jsonrpc: '2.0', id: 9, method: 'sampling/createMessage' },
        { jsonrpc: '2.0', id: 2 },
        { jsonrpc: '2.0', method: 'notifications/progress', params: { id: 5 } },
      ]),
    ),
    [1],
    'requests from the server, messages with neither result nor error, and notifications are left out',
  );
  t.same(responseIds('{"jsonrpc":"2.0","method":"notifications/message"}'), [], 'nothing that could hold an id');
  t.same(responseIds('"id": not json'), [], 'not JSON: none');
});
