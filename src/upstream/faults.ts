/**
 * Whose fault a failed request to a replica was, from the error the gateway's upstream client
 * raised: the one table of causes that decides what counts against a replica's health (CONTRACT.md
 * §7: only what the replica did). The routing answers the client from the same attribution.
 */

export type Fault =
  /** The client went away, or the gateway aborted the request: nobody's fault. */
  | 'aborted'
  /** The replica's stream budget is full (upstream/budget.ts): nothing was sent. */
  | 'budget'
  /**
   * The gateway's own client refused the request before a byte of it left (an argument it does not
   * take, a header it does not support): the gateway's fault, for that request alone.
   */
  | 'gateway'
  /** Nothing listens at the replica's address (R4: its process is gone). Nothing was sent. */
  | 'refused'
  /** The connection could not be made in time or at all: nothing was sent. */
  | 'unreachable'
  /** The replica cut the connection, did not answer in time, or answered something that is not HTTP. */
  | 'replica';

/** Error codes (undici's, Node's, the system's) and the fault each one shows. */
const CAUSES: Readonly<Record<string, Fault>> = {
  UND_ERR_ABORTED: 'aborted',
  UND_ERR_ABORT: 'aborted',
  ABORT_ERR: 'aborted',
  // The gateway's own: a client that left before its request was sent, a stream over its budget.
  CLIENT_GONE: 'aborted',
  GW_STREAM_BUDGET: 'budget',
  // Raised while the request is built, before it is queued on a connection.
  UND_ERR_INVALID_ARG: 'gateway',
  UND_ERR_NOT_SUPPORTED: 'gateway',
  UND_ERR_REQ_CONTENT_LENGTH_MISMATCH: 'gateway',
  // The gateway closed the pool under the request (a reload, a replica removed from the configuration).
  UND_ERR_CLOSED: 'gateway',
  UND_ERR_DESTROYED: 'gateway',
  ECONNREFUSED: 'refused',
  UND_ERR_CONNECT_TIMEOUT: 'unreachable',
  ENOTFOUND: 'unreachable',
  EAI_AGAIN: 'unreachable',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  ECONNRESET: 'replica',
  EPIPE: 'replica',
  ETIMEDOUT: 'replica',
  UND_ERR_SOCKET: 'replica',
  UND_ERR_HEADERS_TIMEOUT: 'replica',
  UND_ERR_BODY_TIMEOUT: 'replica',
  UND_ERR_HEADERS_OVERFLOW: 'replica',
  UND_ERR_RES_CONTENT_LENGTH_MISMATCH: 'replica',
  UND_ERR_RES_EXCEEDED_MAX_SIZE: 'replica',
};

/** The errors of a chain of causes, outermost first. */
function chain(err: unknown): object[] {
  const errors: object[] = [];
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    errors.push(e);
    e = (e as { cause?: unknown }).cause;
  }
  return errors;
}

/** The codes of an error and of its causes, outermost first. */
export function errorCodes(err: unknown): string[] {
  return chain(err).flatMap((e) => {
    const code = (e as { code?: unknown }).code;
    return typeof code === 'string' ? [code] : [];
  });
}

/**
 * The cause of one error: its code in the table, or undici's HTTP parser error, the replica's
 * answer that was not HTTP (its code is `HPE_*`, or none when the answer did not even start as one).
 */
function causeOf(e: object): Fault | undefined {
  const { code, name } = e as { code?: unknown; name?: unknown };
  if (typeof code === 'string' && code in CAUSES) return CAUSES[code];
  if (name === 'HTTPParserError' || (typeof code === 'string' && code.startsWith('HPE_'))) return 'replica';
  return undefined;
}

/**
 * The fault of a failed request: the outermost error of the chain whose cause is known decides.
 * An error with no known cause was not seen to come from the replica: the gateway's, so that no
 * unforeseen error takes a replica out of service (it is logged at error level where it is answered).
 */
export function faultOf(err: unknown): Fault {
  for (const e of chain(err)) {
    const fault = causeOf(e);
    if (fault !== undefined) return fault;
  }
  return 'gateway';
}

/** Whether the table knows what the error shows (false: an unforeseen error, worth an error line). */
export function isKnownFault(err: unknown): boolean {
  return chain(err).some((e) => causeOf(e) !== undefined);
}
