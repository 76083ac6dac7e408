/**
 * Every code the gateway raises on purpose, in one registry, as fastify's `createError(code,
 * message, status)`: the errors it throws (configuration, store, cursor secret) and every answer a
 * client can get from the gateway itself, with its HTTP status, JSON-RPC code and message. Code
 * branches on `code`, never on message text. docs/errors.md lists the same codes
 * (test/config/reference.test.ts keeps them in step, and test/unit/errors.test.ts checks that each
 * is raised somewhere in src/ and that nothing raises a code the registry does not hold).
 *
 * How an answer shows its code: where CONTRACT.md fixes the body byte for byte (404 Session not
 * found, the 410 of reject mode, the -32010 of a pending call, the stream_reset signal), the body
 * stays as fixed and the code travels in the `Mcp-Gateway-Error` response header (not for the
 * events inside a stream, whose status line is 200). Every other answer carries it in both: the
 * header, and `error.data.code` of its JSON-RPC body.
 */

interface Raised {
  /** What the code means, for the error codes' table (docs/errors.md). */
  readonly meaning: string;
}

interface Answered extends Raised {
  /** The HTTP status of the answer. */
  readonly status: number;
  /** An event inside a stream (its status line is the stream's 200), not an answer of its own. */
  readonly stream?: boolean;
  /** Sent as Retry-After (upstream.retryAfterSeconds): the client may try again later. */
  readonly retry?: boolean;
  /** The JSON-RPC error code, or the notification's method. */
  readonly rpc: number | string;
  /** The JSON-RPC error's message; `%s` is replaced by the answer's detail. */
  readonly message: string;
  /** CONTRACT.md fixes the body: the code goes in the header only. */
  readonly fixed?: boolean;
}

export const ERROR_CODES = {
  GW_CONFIG_INVALID: { meaning: 'the configuration file does not validate' },
  GW_CONFIG_UNREADABLE: { meaning: 'the configuration file cannot be read or parsed' },
  GW_CURSOR_SECRET_INVALID: { meaning: 'a cursor secret (cursor.secret or one of cursor.previousSecrets) is not a string or Buffer of at least 32 bytes, or is the same as another' },
  GW_STORE_REFUSED: {
    meaning:
      "at start, the store refused the gateway for good: its TLS certificate is not trusted (store.tls), the credentials are wrong, or the store's user lacks a permission (docs/security.md); the gateway exits 1. Later, the same is a store outage (GW_STORE_UNAVAILABLE)",
  },
  GW_SESSION_NOT_FOUND: {
    status: 404,
    rpc: -32001,
    message: 'Session not found',
    fixed: true,
    meaning: 'the session is unknown, expired, ended with DELETE, or lost with its owner (R3); never forwarded',
  },
  GW_STORE_UNAVAILABLE: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: the session store does not answer',
    meaning: 'the store did not answer in time or failed; nothing that needs it is routed or continued by guess',
  },
  GW_NO_REPLICA: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: no replica is up',
    meaning: 'no healthy replica could take a new session (none up, or every one refused the connection)',
  },
  GW_REPLICA_SUSPECT: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: replica %s is not answering properly',
    meaning: "the session's owner is suspected (R4: timeouts, resets, 502 to 504); the session lives on",
  },
  GW_PRINCIPAL_REFUSED: {
    status: 403,
    rpc: -32000,
    message: 'Forbidden: this request does not carry the credential the session was bound to',
    meaning:
      "a continuation the gateway would serve from its own state (J6), for a request whose credential is not the session's, while the owner that could accept it is gone; none of the session's events",
  },
  GW_PRINCIPAL_UNVERIFIED: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: "Service temporarily unavailable: replica %s could not confirm this request's credential for the session",
    meaning:
      "a continuation the gateway would serve from its own state (J6), for a request whose credential is not the session's, when the owner did not answer the check in time or failed it with a 5xx; none of the session's events",
  },
  GW_UPSTREAM_UNREACHABLE: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: replica %s could not be reached',
    meaning: "the session's owner could not be connected to in time (nothing was sent; a refused connection is R4's gone instead)",
  },
  GW_UPSTREAM_FAILED: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: replica %s did not answer',
    meaning: 'the replica failed after the request was sent (reset, timeout); never retried elsewhere',
  },
  GW_STREAM_BUDGET: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: replica %s has as many SSE streams open as it may (upstream.maxStreams)',
    meaning:
      "a GET stream over its replica's stream budget with no held stream to give way (CONTRACT.md §7): refused at once, never queued or sent; the replica's other requests are unaffected and its health is unchanged; counted in mcp_gateway_stream_budget_exceeded_total",
  },
  GW_RESUMPTION_BUSY: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: too many resumptions are being decided on this instance (resumption.admission)',
    meaning:
      'a GET with Last-Event-ID past the bound of resumption.admission (a reconnection storm): answered at once, before anything of the session was read, its cursor untouched, so that the retry after Retry-After is decided like the first try would have been; counted in mcp_gateway_resumptions_busy_total',
  },
  GW_REQUEST_NOT_SENT: {
    status: 502,
    rpc: -32000,
    message: "Bad gateway: the gateway's upstream client refused to send this request (%s)",
    meaning:
      "the gateway's own upstream client refused the request before any byte of it left (a header or argument it does not take): this request alone fails, nothing reached the replica and its health is unchanged; logged",
  },
  GW_CONNECTION_NAMES_END_TO_END: {
    status: 400,
    rpc: -32600,
    message: 'Bad request: the Connection header names %s, which every recipient needs (RFC 9110 §7.6.1)',
    meaning:
      'a request whose Connection header lists a header the gateway itself reads and the replica needs (Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name, Accept, Content-Type, Authorization, Origin); a header named there would not be forwarded, so the gateway and the replica would read different requests; never forwarded',
  },
  GW_SHUTTING_DOWN: {
    status: 503,
    retry: true,
    rpc: -32000,
    message: 'Service temporarily unavailable: the gateway is shutting down',
    meaning:
      'a request that arrived on an open connection while its listener (MCP or admin) closes (SIGTERM, SIGINT); never forwarded, the connection is closed: another gateway instance serves it',
  },
  GW_SESSION_ID_CONFLICT: {
    status: 502,
    rpc: -32000,
    message: 'The replica issued a session id that is already in use',
    meaning: 'the replica answered with a session id the store already holds; the answer is dropped',
  },
  GW_ORIGIN_FORBIDDEN: {
    status: 403,
    rpc: -32000,
    message: 'Origin not allowed',
    meaning: 'the Origin header is not in security.allowedOrigins (R6)',
  },
  GW_HEADER_MISMATCH: {
    status: 400,
    rpc: -32020,
    message: 'Bad Request: the request headers and body disagree: %s',
    fixed: true,
    meaning:
      "a 2026-07-28 request whose MCP-Protocol-Version, Mcp-Method or Mcp-Name header disagrees with its body (§9 M1), never forwarded; the body is the SDK v2 server's own answer, with the request's id",
  },
  GW_TASK_LOST: {
    status: 200,
    rpc: -32602,
    message: 'Task lost: the server that held it is gone',
    meaning:
      "a tasks/get, tasks/update, tasks/cancel or tasks/result of the 2026-07-28 era for a task whose replica is gone (R4: refused, down, restarted, or removed from the configuration); never sent to another replica. A JSON-RPC error with the request's id, in a 200 as the replica's own answer to an unknown task (-32602), so that a client fails the task at once",
  },
  GW_BODY_TOO_LARGE: {
    status: 413,
    rpc: -32600,
    message: '%s',
    meaning: 'the request body is over limits.bodyBytes',
  },
  GW_BAD_REQUEST: {
    status: 400,
    rpc: -32000,
    message: '%s',
    meaning: 'the gateway could not read the request (status 400, or the 4xx that says why)',
  },
  GW_NOT_FOUND: {
    status: 404,
    rpc: -32000,
    message: 'Not found: nothing is served at this method and path',
    meaning: 'no route of the listener (MCP or admin) serves the method and path; the MCP endpoint is `path` (and the legacySse paths)',
  },
  GW_HEADERS_TOO_LARGE: {
    status: 431,
    rpc: -32600,
    message: 'Bad request: %s',
    meaning: 'the request header block is over limits.headerBytes (a huge Last-Event-ID among them); the connection is closed',
  },
  GW_HEADERS_TIMEOUT: {
    status: 408,
    rpc: -32600,
    message: 'Bad request: %s',
    meaning: 'the request headers did not arrive in time; the connection is closed',
  },
  GW_MALFORMED_REQUEST: {
    status: 400,
    rpc: -32600,
    message: 'Bad request: %s',
    meaning: "Node's HTTP parser refused the request (a control byte in a header, a broken request line); the connection is closed",
  },
  GW_INTERNAL: {
    status: 500,
    rpc: -32000,
    message: 'Internal gateway error',
    meaning: 'a fault in the gateway itself (logged at error level with the request)',
  },
  GW_NOT_RESUMABLE: {
    status: 410,
    rpc: -32010,
    message: 'Last-Event-ID cannot be resumed; reconnect without it',
    fixed: true,
    meaning: 'resumption.mode reject: the stream cannot be continued (Mcp-Resumption-Reason says why)',
  },
  GW_STREAM_RESET: {
    status: 200,
    rpc: 'notifications/gateway/stream_reset',
    message: '',
    fixed: true,
    stream: true,
    meaning: 'resumption.mode signal: the stream was not continued; a new stream begins with this notification',
  },
  GW_OUTCOME_UNKNOWN: {
    status: 200,
    rpc: -32010,
    message: "Stream not resumable; the request's outcome is unknown",
    fixed: true,
    stream: true,
    meaning: 'an event of the signal stream, one per call whose response the gateway never forwarded: the call fails at once',
  },
} as const satisfies Record<string, Raised | Answered>;

export type ErrorCode = keyof typeof ERROR_CODES;
/** The codes a client can be answered with. */
export type AnswerCode = { [C in ErrorCode]: (typeof ERROR_CODES)[C] extends { status: number } ? C : never }[ErrorCode];

/** The registry entry of an answer code. */
export function answerSpec(code: AnswerCode): Answered {
  return ERROR_CODES[code];
}

export class GatewayError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options);
    this.name = 'GatewayError';
  }
}

/**
 * Every failure of a store operation (unreachable, timed out, script error) surfaces as this.
 *
 * How the code applies the store-outage policy (CONTRACT.md §7; the policy itself, for operators:
 * docs/store-outages.md): whatever needs the store for a decision (binding a new session, routing
 * a session, deciding a resumption, opening a GET stream) catches this error, and only this one,
 * and answers GW_STORE_UNAVAILABLE (503 with Retry-After) at once; any other error is a fault and
 * propagates (500, logged). Nothing is routed or continued by guess. Streams already open, and a
 * POST stream whose answer is under way, are not answered anew: their records wait for the store
 * in streams/unrecorded.ts while their events go on.
 */
export class StoreError extends GatewayError {
  constructor(
    readonly op: string,
    options: { cause?: unknown } = {},
  ) {
    super('GW_STORE_UNAVAILABLE', `store operation ${op} failed: ${describe(options.cause)}`, options);
    this.name = 'StoreError';
  }
}

/** The store refused the gateway for good (checked at start): `message` names the cause in one line. */
export class StoreRefusedError extends GatewayError {
  constructor(message: string) {
    super('GW_STORE_REFUSED', message);
    this.name = 'StoreRefusedError';
  }
}

export function isStoreError(err: unknown): err is StoreError {
  return err instanceof GatewayError && err.code === 'GW_STORE_UNAVAILABLE';
}

export function describe(cause: unknown): string {
  if (cause instanceof Error) return cause.message;
  return String(cause);
}

/** A JSON-RPC error answer, to the request `id` or to none (`id: null`). */
export function jsonRpcError(code: number, message: string, data?: unknown, id: string | number | null = null): string {
  return JSON.stringify({ jsonrpc: '2.0', id, error: data === undefined ? { code, message } : { code, message, data } });
}
