/** What the demo's scripts share: printing, an SDK client session, and bounded waits. */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

/**
 * Bound of every call in the scripts, generous next to the tools' own 100-200 ms pacing: a broken
 * gateway fails the demo within seconds instead of the SDK's 60 s default.
 */
export const CALL_TIMEOUT_MS = 10_000;

export const say = (line = '') => process.stdout.write(`${line}\n`);

export interface Session {
  client: Client;
  transport: StreamableHTTPClientTransport;
  sessionId: string;
  owner: string;
  /** Settles once the gateway answered the client's standalone GET stream. */
  getStream: Promise<number>;
}

/**
 * An SDK client session at `mcpUrl`, and the replica that owns it (tool whoami). `onGet` sees the
 * answer to every GET the client sends (its standalone stream, its reconnections).
 */
export async function connectSession(mcpUrl: string, onGet: (res: Response, init: RequestInit) => void = () => undefined): Promise<Session> {
  let getAnswered!: (status: number) => void;
  const getStream = new Promise<number>((resolve) => (getAnswered = resolve));
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      if (init?.method === 'GET') {
        getAnswered(res.status);
        onGet(res, init);
      }
      return res;
    },
  });
  const client = new Client({ name: 'gateway-demo', version: '0.1.0' });
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  const sessionId = transport.sessionId;
  if (sessionId === undefined) throw new Error('initialize: the gateway issued no Mcp-Session-Id');
  const owner = await callText(client, 'whoami');
  return { client, transport, sessionId, owner, getStream };
}

export async function callText(client: Client, name: string): Promise<string> {
  return textOf(await client.callTool({ name, arguments: {} }, undefined, { timeout: CALL_TIMEOUT_MS }));
}

export function textOf(result: unknown): string {
  const content = (result as { content?: { type: string; text?: string }[] }).content ?? [];
  return content.find((c) => c.type === 'text')?.text ?? JSON.stringify(result);
}

/** A POST of the session sent with fetch, past the SDK client: headers and body as given. */
export function rawPost(mcpUrl: string, session: Session, headers: Record<string, string>, body: unknown): Promise<Response> {
  return fetch(mcpUrl, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': session.sessionId,
      'mcp-protocol-version': session.transport.protocolVersion ?? LATEST_PROTOCOL_VERSION,
      ...headers,
    },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
}

/** The promise, or an error saying what did not happen within `ms`. */
export async function within<T>(ms: number, failure: () => string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${failure()} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
