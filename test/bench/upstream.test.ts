/** The bench's upstream (bench/upstream.ts): its paced streams, with ids numbered anew on every stream or without. */
import t from 'tap';
import { listen } from '../../bench/upstream.js';
import { rawStreams } from '../helpers/raw-sse.js';

t.test('paced-R writes events without ids; paced-R-renumbered gives them ids from 1 on every stream, whatever the Last-Event-ID', async (t) => {
  const upstream = await listen(0);
  t.teardown(() => upstream.close());
  const { open } = rawStreams(t);
  const url = `http://127.0.0.1:${upstream.port}/mcp`;
  const plain = await open(url, 's1', undefined, 10_000, { 'x-bench-sse': 'paced-200' });
  t.same((await plain.events.until(2)).slice(0, 2).map((e) => e.id), [undefined, undefined], 'no ids');
  plain.close();
  const first = await open(url, 's1', undefined, 10_000, { 'x-bench-sse': 'paced-200-renumbered' });
  const before = (await first.events.until(3)).slice(0, 3);
  t.same(before.map((e) => e.id), ['1', '2', '3'], 'ids 1, 2, 3');
  t.match(before[0]!.data, /"seq":1,/, 'the seq is the id');
  first.close();
  const again = await open(url, 's1', '3', 10_000, { 'x-bench-sse': 'paced-200-renumbered' });
  t.same((await again.events.until(1))[0]!.id, '1', 'a resumption after 3 starts at 1 again: a counter, not a log');
  again.close();
});
