/** The real SDK client, connected through the gateway. */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, type StreamableHTTPClientTransportOptions } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Teardown } from './gateway.js';

export interface Connected {
  client: Client;
  transport: StreamableHTTPClientTransport;
  sessionId: string;
}

export async function connect(t: Teardown, url: string, options: StreamableHTTPClientTransportOptions = {}): Promise<Connected> {
  const client = new Client({ name: 'gateway-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), options);
  await client.connect(transport);
  t.teardown(() => client.close());
  const sessionId = transport.sessionId;
  if (!sessionId) throw new Error('the server issued no session id');
  return { client, transport, sessionId };
}

/** Calls a tool and returns its first text content. */
export async function callText(client: Client, name: string, args: Record<string, unknown> = {}): Promise<string> {
  const result = await client.callTool({ name, arguments: args });
  const content = result.content as { type: string; text?: string }[];
  const text = content.find((c) => c.type === 'text')?.text;
  if (text === undefined) throw new Error(`tool ${name} returned no text: ${JSON.stringify(result)}`);
  return text;
}

/** A fetch that sends each request to the next of `bases` in turn (same path and query). */
export function alternatingFetch(bases: readonly string[]): { fetch: typeof fetch; hosts: string[] } {
  let next = 0;
  const hosts: string[] = [];
  const rotating = (input: string | URL | Request, init?: RequestInit) => {
    const original = new URL(input instanceof Request ? input.url : input);
    const base = new URL(bases[next++ % bases.length] as string);
    original.protocol = base.protocol;
    original.host = base.host;
    hosts.push(base.host);
    return fetch(original, init);
  };
  return { fetch: rotating as typeof fetch, hosts };
}
