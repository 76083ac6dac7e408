/**
 * The start check of the Redis store (Store.checkAccess): the store answers, and its user may run
 * every command the gateway uses on the gateway's keys and channels (docs/security.md "Redis ACL").
 * It tells a store that refuses the gateway for good (a certificate the gateway does not trust, a
 * client certificate the server does not accept, wrong credentials, a permission missing: the
 * gateway exits 1 with one line naming the cause) from one that does not answer yet (the gateway
 * starts unready and recovers). After start, both are an outage (CONTRACT.md §7).
 */

import type { Cluster, Redis } from 'ioredis';
import { StoreError, StoreRefusedError } from '../../errors.js';
import { retryWithin } from '../../retry.js';
import type { Runner } from './command.js';
import { accessChannel, accessKeys } from './keys.js';
import type { ScriptedClient } from './scripts/index.js';
import type { ChannelSubscriber } from './subscriber.js';

const CERTIFICATE_UNTRUSTED = "TLS: the server's certificate is not signed by an authority the gateway trusts (store.tls.ca)";
const CLIENT_CERTIFICATE_REFUSED = "TLS: the server does not accept the gateway's client certificate (store.tls.cert, store.tls.key)";

/**
 * What each error code means when a connection fails this way: Node's TLS codes (the server's
 * certificate as the gateway checks it, and the alerts a server sends when it refuses the
 * gateway's), and Redis's own codes, the first word of its error replies.
 */
const REFUSALS: Readonly<Record<string, string>> = {
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: CERTIFICATE_UNTRUSTED,
  UNABLE_TO_GET_ISSUER_CERT: CERTIFICATE_UNTRUSTED,
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: CERTIFICATE_UNTRUSTED,
  SELF_SIGNED_CERT_IN_CHAIN: CERTIFICATE_UNTRUSTED,
  DEPTH_ZERO_SELF_SIGNED_CERT: CERTIFICATE_UNTRUSTED,
  CERT_SIGNATURE_FAILURE: CERTIFICATE_UNTRUSTED,
  CERT_UNTRUSTED: CERTIFICATE_UNTRUSTED,
  CERT_HAS_EXPIRED: "TLS: the server's certificate has expired",
  CERT_NOT_YET_VALID: "TLS: the server's certificate is not valid yet",
  CERT_REVOKED: "TLS: the server's certificate is revoked",
  ERR_TLS_CERT_ALTNAME_INVALID: "TLS: the server's certificate does not name the host connected to (store.tls.servername names the one it holds)",
  ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED: "TLS: the server requires a client certificate (store.tls.cert, store.tls.key)",
  ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE: CLIENT_CERTIFICATE_REFUSED,
  ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN: CLIENT_CERTIFICATE_REFUSED,
  ERR_SSL_TLSV1_ALERT_UNKNOWN_CA: CLIENT_CERTIFICATE_REFUSED,
  ERR_SSL_TLSV1_ALERT_ACCESS_DENIED: CLIENT_CERTIFICATE_REFUSED,
  ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED: "TLS: the server finds the gateway's client certificate expired (store.tls.cert)",
  ERR_SSL_WRONG_VERSION_NUMBER: 'TLS: the server does not speak TLS on this port (a rediss:// URL for a plain port)',
  WRONGPASS: 'the server refused the user and password of the store URL',
  NOAUTH: 'the server requires a password and the store URL gives none',
  NOPERM: "the store's user lacks a permission (docs/security.md, Redis ACL)",
};

/** Redis's codes where a client only passes them on as text (Sentinel: "All sentinels are unreachable ... Last error: WRONGPASS ..."). */
const REDIS_CODE = /\b(WRONGPASS|NOAUTH|NOPERM)\b/;

/**
 * The cause, in words, when `err` (or what it wraps: a cause, a cluster's last node error) is the
 * store refusing the gateway; undefined for anything that may pass (unreachable, timed out).
 */
export function refusalOf(err: unknown): string | undefined {
  // The innermost error that says it: a StoreError repeats its cause's message.
  const chain: Error[] = [];
  for (let at: unknown = err; at instanceof Error && chain.length < 4; at = (at as { lastNodeError?: unknown }).lastNodeError ?? at.cause) chain.push(at);
  for (const at of chain.reverse()) {
    const code = (at as NodeJS.ErrnoException).code;
    const tls = code === undefined ? undefined : REFUSALS[code];
    if (tls !== undefined) return `${tls}: ${at.message.includes(code!) ? '' : `${code} `}${at.message}`;
    const redisCode = REDIS_CODE.exec(at.message)?.[1];
    if (redisCode !== undefined) return `${REFUSALS[redisCode]!}: ${at.message}`;
  }
  return undefined;
}

function refused(cause: string): StoreRefusedError {
  return new StoreRefusedError(`the store refused the gateway: ${cause}`);
}

export interface AccessCheck {
  client: ScriptedClient;
  run: Runner;
  keyPrefix: string;
  /** The last error the connection reported since it was last ready: it says why a command failed. */
  connectionError: () => Error | undefined;
  /** A subscriber of its own, closed after the check; `onError` hears what it reports. */
  subscriber: (onError: (err: Error) => void) => ChannelSubscriber;
}

/** The pauses between attempts while the store does not answer yet. */
const PAUSES = { firstMs: 10, maxMs: 200 };

/**
 * Resolves once the store answers and its user may run every command of the gateway; rejects with
 * StoreRefusedError when the store refuses the gateway, or StoreError when it does not answer
 * within `timeoutMs`.
 */
export async function checkAccess(check: AccessCheck, timeoutMs: number): Promise<void> {
  const { client } = check;
  await retryWithin(timeoutMs, PAUSES, () => attempt(check, 'ping', () => client.ping()), (err) => !(err instanceof StoreRefusedError));
  // INFO is how ioredis checks that a node is ready (and, through Sentinel, that it is the master).
  await attempt(check, 'checkAccess', () => client.info('server'));
  const [string, hash, list, sortedSet] = accessKeys(check.keyPrefix);
  const failed = await attempt(check, 'checkAccess', () => client.gwAccess(string, hash, list, sortedSet, accessChannel(check.keyPrefix)));
  if (failed.length > 0) throw refused(`${REFUSALS['NOPERM']}: ${failed.join('; ')}`);
  await checkSubscribe(check, timeoutMs);
}

/** One store operation, whose failure is a refusal when it or the connection's last error says so. */
async function attempt<T>(check: AccessCheck, op: string, command: () => Promise<T>): Promise<T> {
  try {
    return await check.run(op, command);
  } catch (err) {
    const connectionError = check.connectionError();
    const cause = refusalOf(connectionError) ?? refusalOf(err);
    if (cause !== undefined) throw refused(cause);
    // "Connection is closed" says less than why it closed.
    throw connectionError === undefined ? err : new StoreError(op, { cause: connectionError });
  }
}

/**
 * SSUBSCRIBE (and SUNSUBSCRIBE) on a channel of the prefix, on a connection of its own, which has
 * to connect first: bounded by `timeoutMs`, as the first connection is.
 */
async function checkSubscribe(check: AccessCheck, timeoutMs: number): Promise<void> {
  let fail: (err: unknown) => void = () => undefined;
  const subscriber = check.subscriber((err) => fail(err));
  let timer: NodeJS.Timeout | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      fail = (err) => {
        const cause = refusalOf(err);
        reject(cause === undefined ? new StoreError('checkAccess', { cause: err }) : refused(cause));
      };
      timer = setTimeout(() => fail(new Error(`no subscription within ${timeoutMs} ms`)), timeoutMs);
      const stop = subscriber.listen(accessChannel(check.keyPrefix), ignore, (live) => {
        if (!live) return;
        stop();
        resolve();
      });
    });
  } finally {
    clearTimeout(timer);
    subscriber.close();
  }
}

function ignore(): void {}
