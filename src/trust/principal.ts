/**
 * J6: what the gateway serves of a session from its own state (the journal, a held stream, the
 * signal and the responses journaled for it) goes only to the session's own client.
 *
 * A session is bound at `initialize` to a principal: a keyed fingerprint (CursorCodec.principal)
 * of the request's credential headers (`security.credentialHeaders`), never the values. Before the
 * gateway serves a session itself, `check` compares the request's principal with the session's:
 * - the same: served; the same under a previous cursor key (a session bound before a rotation,
 *   docs/security.md#cursor-keys): served, and bound again under the signing key;
 * - another, with the owner alive: the owner is asked, with a `ping` into the session that
 *   carries the request's credential headers, whether it accepts this request for the session (a
 *   refreshed token of the same user is the usual case). Its 2xx: served, and the session is bound
 *   to the new principal from then on, so that the owner's death later (J4) does not strand a
 *   client whose token was refreshed. Its 401, 403 or 404: that answer, with its
 *   `WWW-Authenticate`, is what the client gets. Anything else (no answer within
 *   `security.principalCheckTimeoutMs`, a 5xx, another status): 503 with Retry-After, since the
 *   owner could not say;
 * - another, with the owner gone (nobody left to ask): 403.
 * A refusal carries none of the session's events and no cursor, and touches nothing of its
 * streams: the caller answers before it reads, attaches or supersedes anything.
 *
 * The ping is the request the MCP specification requires every server to answer, and has no
 * effect on the session; it is never counted against the owner's health (§7: a check the gateway
 * makes for one client is not what the replica did for the fleet).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Config } from '../config/schema.js';
import type { CursorKeys } from '../cursor/keys.js';
import { isStoreError } from '../errors.js';
import { SESSION_HEADER } from '../headers.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { SessionRecord, Store } from '../store/types.js';
import { describeUpstreamError, replicaPath, UpstreamAbort, type Upstreams } from '../upstream/index.js';
import type { ReplicaConfig } from '../config/schema.js';

/** The JSON-RPC request that asks the owner about a credential: answered by every MCP server. */
const PING = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 'mcp-gateway-principal-check', method: 'ping' }));
/** How much of the owner's refusal is passed on: an error body, not a stream. */
const MAX_REFUSAL_BYTES = 16 * 1024;
/** The owner's answers that refuse the request for the session, passed on as they are. */
const REFUSALS = new Set([401, 403, 404]);
/** The headers of a refusal that the client needs (RFC 9110 §11.6.1: the challenge). */
const REFUSAL_HEADERS = ['www-authenticate', 'content-type'];

export type PrincipalVerdict =
  | { readonly kind: 'allowed' }
  /** The owner's own refusal, to pass on as it is. */
  | { readonly kind: 'owner_refused'; readonly status: number; readonly headers: Record<string, string>; readonly body: Buffer }
  /** The gateway's answer: GW_PRINCIPAL_REFUSED (owner gone) or GW_PRINCIPAL_UNVERIFIED (owner could not say). */
  | { readonly kind: 'refused'; readonly code: 'GW_PRINCIPAL_REFUSED' | 'GW_PRINCIPAL_UNVERIFIED'; readonly owner: string };

/**
 * The credential material of a request: each configured header in order, its values as received
 * (a missing header told apart from an empty one). Pure.
 */
export function credentialMaterial(headers: IncomingHttpHeaders, names: readonly string[]): string {
  return JSON.stringify(names.map((name) => headers[name] ?? null));
}

export interface PrincipalDeps {
  config: () => Config;
  keys: CursorKeys;
  store: Store;
  upstreams: Upstreams;
  /** The configuration of a replica by id; undefined when it is no longer configured. */
  replica: (id: string) => ReplicaConfig | undefined;
  metrics: Metrics;
  logger: Logger;
}

export type Principals = ReturnType<typeof createPrincipals>;

export function createPrincipals(deps: PrincipalDeps) {
  const { config, keys, store, upstreams, metrics, logger } = deps;

  /** The principal of a request's credential headers. */
  async function of(headers: IncomingHttpHeaders): Promise<string> {
    return (await keys.codec()).principal(credentialMaterial(headers, config().security.credentialHeaders));
  }

  /** Whether `request` may be served `session` from the gateway's own state (see above). */
  async function check(request: { headers: IncomingHttpHeaders; url: string }, session: SessionRecord, ownerGone: boolean): Promise<PrincipalVerdict> {
    const codec = await keys.codec();
    const material = credentialMaterial(request.headers, config().security.credentialHeaders);
    const principal = codec.principal(material);
    if (session.principal === principal) {
      metrics.principalChecks.inc({ result: 'match' });
      return { kind: 'allowed' };
    }
    if (session.principal !== undefined && codec.previousPrincipals(material).includes(session.principal)) {
      // Bound before a rotation of the cursor keys: the same credential, under a key that still
      // verifies. Bound again under the signing key, so that it still matches once that key goes.
      metrics.principalChecks.inc({ result: 'match' });
      await rebind(session, principal, 'the store did not take the principal under the new cursor key: it is matched under the previous one until then');
      return { kind: 'allowed' };
    }
    const owner = ownerGone ? undefined : deps.replica(session.owner);
    if (owner === undefined) {
      metrics.principalChecks.inc({ result: 'owner_gone' });
      logger.warn({ session: keys.sessionFingerprint(session.sessionId), replica: session.owner }, 'a continuation refused: not the credential the session was bound to, and its owner is gone');
      return { kind: 'refused', code: 'GW_PRINCIPAL_REFUSED', owner: session.owner };
    }
    const asked = await askOwner(request, session, owner);
    if (asked.kind === 'allowed') {
      metrics.principalChecks.inc({ result: 'accepted' });
      // Served all the same (the owner accepted it); the next request is asked again.
      await rebind(session, principal, 'the store did not take the accepted credential: the owner will be asked again next time');
    } else {
      metrics.principalChecks.inc({ result: asked.kind === 'owner_refused' ? 'refused' : 'unverified' });
      logger.warn(
        { session: keys.sessionFingerprint(session.sessionId), replica: owner.id, ...(asked.kind === 'owner_refused' ? { status: asked.status } : {}) },
        asked.kind === 'owner_refused'
          ? "a continuation refused: the session's owner refused the request's credential"
          : "a continuation refused for now: the session's owner could not confirm the request's credential",
      );
    }
    return asked;
  }

  /** Binds `session` to `principal`; a store that does not take it is logged with `unsaved`, and the request is served all the same. */
  async function rebind(session: SessionRecord, principal: string, unsaved: string): Promise<void> {
    await store.setPrincipal(session.sessionId, principal).catch((err: unknown) => {
      if (!isStoreError(err)) throw err;
      logger.warn({ session: keys.sessionFingerprint(session.sessionId) }, unsaved);
    });
  }

  async function askOwner(request: { headers: IncomingHttpHeaders; url: string }, session: SessionRecord, owner: ReplicaConfig): Promise<PrincipalVerdict> {
    const headers: Record<string, string | string[]> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      [SESSION_HEADER]: session.sessionId,
    };
    const version = request.headers['mcp-protocol-version'];
    if (typeof version === 'string') headers['mcp-protocol-version'] = version;
    for (const name of config().security.credentialHeaders) {
      const value = request.headers[name];
      if (value !== undefined) headers[name] = value;
    }
    const abort = new UpstreamAbort();
    const timer = setTimeout(() => abort.abort(), config().security.principalCheckTimeoutMs);
    const unverified = { kind: 'refused', code: 'GW_PRINCIPAL_UNVERIFIED', owner: owner.id } as const;
    try {
      const response = await upstreams.send(owner, { method: 'POST', path: replicaPath(owner, request.url), headers, body: PING, signal: abort });
      if (response.statusCode >= 200 && response.statusCode < 300) {
        // The pong itself says nothing more; an SSE answer is not read to its end.
        abort.abort();
        response.body.on('error', () => undefined);
        return { kind: 'allowed' };
      }
      if (!REFUSALS.has(response.statusCode)) {
        await response.body.dump().catch(() => undefined);
        return unverified;
      }
      const body = await readBounded(response.body);
      const passed: Record<string, string> = {};
      for (const name of REFUSAL_HEADERS) {
        const value = response.headers[name];
        if (typeof value === 'string') passed[name] = value;
      }
      return { kind: 'owner_refused', status: response.statusCode, headers: passed, body };
    } catch (err) {
      logger.debug({ replica: owner.id, err: describeUpstreamError(err) }, 'the credential check got no answer');
      return unverified;
    } finally {
      clearTimeout(timer);
    }
  }

  return { of, check };
}

async function readBounded(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= MAX_REFUSAL_BYTES) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).subarray(0, MAX_REFUSAL_BYTES);
}
