/** The logger's redaction: keys, bytes, errors and their causes, known secrets in any encoding. */
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger, LogSecrets } from '../../src/logger.js';

function capture(secrets?: LogSecrets) {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter((l) => l !== ''));
      done();
    },
  });
  const logger = createLogger('trace', { destination, ...(secrets ? { secrets } : {}) });
  return { logger, lines, last: () => JSON.parse(lines.at(-1)!) as Record<string, unknown> };
}

t.test('an error keeps type, code, message and cause; its raw packet and other properties go', async (t) => {
  const { logger, last } = capture();
  const cause = Object.assign(new Error('no reply within 500 ms'), { headers: { authorization: 'Bearer abc' } });
  const err = Object.assign(new Error('store operation ping failed: no reply within 500 ms', { cause }), {
    code: 'GW_STORE_UNAVAILABLE',
    rawPacket: Buffer.from('GET / HTTP/1.1\r\nAuthorization: Bearer abc\r\n'),
    config: { secret: 'x' },
  });
  logger.trace({ err }, 'client error');
  t.same(last()['err'], { type: 'Error', message: 'store operation ping failed: no reply within 500 ms', code: 'GW_STORE_UNAVAILABLE', cause: { type: 'Error' } });
});

t.test('an error without a code keeps its stack; an error logged alone too', async (t) => {
  const { logger, last } = capture();
  logger.error(new TypeError('boom'));
  const err = last()['err'] as Record<string, unknown>;
  t.equal(err['type'], 'TypeError');
  t.match(err['stack'], /^TypeError: boom/);
});

t.test('secret keys are censored at any depth, bytes are never written, live objects are named', async (t) => {
  const { logger, last } = capture();
  logger.info({ a: { b: { Authorization: 'Bearer abc', cookie: 'c=1' } }, raw: new Uint8Array([1, 2, 3]), list: [{ password: 'p' }], at: new URL('redis://u:pw@h:1/') }, 'x');
  t.same(last(), { ...last(), a: { b: { Authorization: '[redacted]', cookie: '[redacted]' } }, raw: '[3 bytes]', list: [{ password: '[redacted]' }], at: 'redis://u:[redacted]@h:1/' });
});

t.test('known secrets and credentials are scrubbed from the line in every encoding', async (t) => {
  const secrets = new LogSecrets();
  const secret = 'a-cursor-secret-of-at-least-32-characters';
  secrets.addConfig({ cursor: { secret }, store: { type: 'redis', url: 'redis://:p%40ssword1@h:6379', keyPrefix: 'k', connectTimeoutMs: 1, commandTimeoutMs: 1, autoPipelining: false, bindingCache: { maxEntries: 1 } } });
  const { logger, lines } = capture(secrets);
  logger.info({ note: `${secret} ${Buffer.from(secret).toString('base64')} ${Buffer.from(secret).toString('hex')}` }, 'p@ssword1 and Bearer tok123 in the message');
  const line = lines.at(-1)!;
  for (const hidden of [secret, Buffer.from(secret).toString('base64'), Buffer.from(secret).toString('hex'), 'p@ssword1', 'tok123']) {
    t.notOk(line.includes(hidden), `${hidden.slice(0, 8)}… is not in the line`);
  }
  t.match(line, /Bearer \[redacted\]/);
});
