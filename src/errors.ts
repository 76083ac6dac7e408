/**
 * Every error the gateway raises on purpose, with a stable code. Code branches on `code`, never on
 * message text. The README lists the same codes (test/config/reference.test.ts keeps them in step).
 */

export const ERROR_CODES = {
  GW_CONFIG_INVALID: 'the configuration file does not validate',
  GW_CONFIG_UNREADABLE: 'the configuration file cannot be read or parsed',
  GW_STORE_UNAVAILABLE: 'the store did not answer in time or failed',
  GW_NO_REPLICA: 'no healthy replica could take a new session',
  GW_UPSTREAM_UNREACHABLE: 'the replica could not be reached before the request was sent',
  GW_UPSTREAM_FAILED: 'the replica failed after the request was sent',
  GW_CURSOR_SECRET_INVALID: 'the cursor secret is not a string or Buffer of at least 32 bytes',
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

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

/** Every failure of a store operation (unreachable, timed out, script error) surfaces as this. */
export class StoreError extends GatewayError {
  constructor(
    readonly op: string,
    options: { cause?: unknown } = {},
  ) {
    super('GW_STORE_UNAVAILABLE', `store operation ${op} failed: ${describe(options.cause)}`, options);
    this.name = 'StoreError';
  }
}

export function isStoreError(err: unknown): err is StoreError {
  return err instanceof GatewayError && err.code === 'GW_STORE_UNAVAILABLE';
}

export function describe(cause: unknown): string {
  if (cause instanceof Error) return cause.message;
  return String(cause);
}

/** A JSON-RPC error answer that belongs to no request (`id: null`): the body of the gateway's own 4xx and 5xx. */
export function jsonRpcError(code: number, message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } });
}
