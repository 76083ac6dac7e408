/**
 * The server the conformance suite (@modelcontextprotocol/conformance) tests, as a child process:
 * `--era 2025` is the SDK v1 with sessions (StreamableHTTPServerTransport, one per session, as
 * the gateway's replicas are), `--era 2026` the SDK v2 (`createMcpHandler`, stateless, the
 * 2026-07-28 revision). Both answer the scenarios' fixtures (fixtures.ts) and refuse a Host that
 * is not loopback (DNS rebinding protection). Prints one JSON line `{"event":"listening",...}`.
 *
 * `--peer URL` (repeatable) names the other replicas of its fleet: a list change
 * (`test_trigger_tool_change`, `test_trigger_prompt_change`) is published to them through
 * `POST /control/changed?list=tools|prompts`, the fleet-wide event bus a multi-process deployment
 * supplies, so that a `subscriptions/listen` stream held by one replica hears of a change made
 * through another.
 */
import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { completable as completableV1 } from '@modelcontextprotocol/sdk/server/completable.js';
import { McpServer as McpServerV1, ResourceTemplate as ResourceTemplateV1 } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CreateMessageResultSchema,
  ElicitResultSchema,
  isInitializeRequest,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import {
  acceptedContent,
  CLIENT_CAPABILITIES_META_KEY,
  completable,
  createMcpHandler,
  hostHeaderValidationResponse,
  inputRequired,
  inputResponse,
  localhostAllowedHostnames,
  McpServer,
  ResourceTemplate,
  type InputRequests,
  type McpHttpHandler,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import * as fx from './fixtures.js';

const { values } = parseArgs({
  options: { era: { type: 'string' }, id: { type: 'string' }, port: { type: 'string', default: '0' }, peer: { type: 'string', multiple: true } },
});
const era = values.era;
if (era !== '2025' && era !== '2026') throw new Error('--era 2025 or --era 2026');
const id = values.id ?? `conformance-${era}`;
const peers = values.peer ?? [];

type List = 'tools' | 'prompts';
let publishLocally: (list: List) => void = () => undefined;

/** A list change, here and on every peer. */
async function changed(list: List): Promise<void> {
  publishLocally(list);
  await Promise.all(peers.map(async (peer) => (await fetch(`${new URL(peer).origin}/control/changed?list=${list}`, { method: 'POST' })).arrayBuffer()));
}

// ---- 2025 era: SDK v1, one server and transport per session ----

function v1Server(): McpServerV1 {
  const server = new McpServerV1(
    { name: `conformance-${id}`, version: '1.0.0' },
    { capabilities: { logging: {}, resources: { subscribe: true, listChanged: true }, completions: {} } },
  );
  for (const [name, [description, result]] of Object.entries(fx.STATIC_TOOLS)) {
    server.registerTool(name, { description, inputSchema: {} }, () => structuredClone(result) as never);
  }
  server.registerTool('test_tool_with_logging', { description: 'logs three times', inputSchema: {} }, async (_args, extra) => {
    for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await delay(fx.STEP_MS);
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
    }
    return { content: [fx.text('Logging tool completed')] };
  });
  server.registerTool('test_tool_with_progress', { description: 'reports progress', inputSchema: {} }, async (_args, extra) => {
    const progressToken = extra._meta?.progressToken;
    for (const [i, progress] of fx.PROGRESS_STEPS.entries()) {
      if (i > 0) await delay(fx.STEP_MS);
      if (progressToken !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
    }
    return { content: [fx.text('Progress tool completed')] };
  });
  server.registerTool('test_sampling', { description: 'asks the client to sample', inputSchema: { prompt: z.string() } }, async ({ prompt }, extra) => {
    const answer = await extra.sendRequest(
      { method: 'sampling/createMessage', params: { messages: [{ role: 'user', content: fx.text(prompt) }], maxTokens: 100 } },
      CreateMessageResultSchema,
    );
    const content = answer.content;
    return { content: [fx.text(`LLM response: ${'text' in content ? content.text : JSON.stringify(content)}`)] };
  });
  server.registerTool('test_elicitation', { description: 'asks the user', inputSchema: { message: z.string() } }, async ({ message }, extra) => {
    const answer = await extra.sendRequest(
      {
        method: 'elicitation/create',
        params: {
          message,
          requestedSchema: {
            type: 'object',
            properties: { username: { type: 'string', description: "User's response" }, email: { type: 'string', description: "User's email address" } },
            required: ['username', 'email'],
          },
        },
      },
      ElicitResultSchema,
    );
    return { content: [fx.text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
  });
  server.registerResource('static-text', fx.STATIC_TEXT.uri, { description: 'a static text resource', mimeType: 'text/plain' }, () => ({
    contents: [fx.STATIC_TEXT],
  }));
  server.registerResource('static-binary', fx.STATIC_BINARY.uri, { description: 'a static binary resource', mimeType: 'image/png' }, () => ({
    contents: [fx.STATIC_BINARY],
  }));
  server.registerResource('watched-resource', 'test://watched-resource', { description: 'a resource to subscribe to', mimeType: 'text/plain' }, () => ({
    contents: [{ uri: 'test://watched-resource', mimeType: 'text/plain', text: 'watched' }],
  }));
  server.registerResource(
    'template',
    new ResourceTemplateV1(fx.TEMPLATE, { list: undefined }),
    { description: 'a resource template', mimeType: 'application/json' },
    (uri, variables) => ({ contents: [fx.templateContents(uri.href, String(variables['id']))] }),
  );
  server.server.setRequestHandler(SubscribeRequestSchema, () => ({}));
  server.server.setRequestHandler(UnsubscribeRequestSchema, () => ({}));
  server.registerPrompt('test_simple_prompt', { description: 'a simple prompt' }, fx.simplePrompt);
  server.registerPrompt(
    'test_prompt_with_arguments',
    { description: 'a prompt with arguments', argsSchema: { arg1: completableV1(z.string(), fx.completeArg), arg2: z.string() } },
    ({ arg1, arg2 }) => fx.promptWithArguments(arg1, arg2),
  );
  server.registerPrompt('test_prompt_with_embedded_resource', { description: 'embeds a resource', argsSchema: { resourceUri: z.string() } }, ({ resourceUri }) =>
    fx.promptWithResource(resourceUri),
  );
  server.registerPrompt('test_prompt_with_image', { description: 'a prompt with an image' }, fx.promptWithImage);
  return server;
}

function serve2025(port: () => number): (req: IncomingMessage, res: ServerResponse, body: unknown) => Promise<void> {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const allowedHosts = () => ['127.0.0.1', 'localhost', '[::1]'].map((host) => `${host}:${port()}`);
  return async (req, res, body) => {
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (transport === undefined) {
      if (sessionId !== undefined || req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(sessionId === undefined ? 400 : 404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sessionId === undefined ? 'No session' : 'Session not found' } }));
        return;
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        enableDnsRebindingProtection: true,
        allowedHosts: allowedHosts(),
        onsessioninitialized: (sid) => void sessions.set(sid, created),
        onsessionclosed: (sid) => void sessions.delete(sid),
      });
      await v1Server().connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, body);
  };
}

// ---- 2026-07-28: SDK v2, stateless ----

function v2Server(): McpServer {
  const server = new McpServer(
    { name: `conformance-${id}`, version: '1.0.0' },
    {
      capabilities: { logging: {}, tools: { listChanged: true }, prompts: { listChanged: true }, completions: {} },
      // A state that fails its check is refused with -32602 before any handler runs.
      requestState: { verify: verifyState },
      // Public for a minute, as the tool list of a fleet whose replicas are all alike may be.
      cacheHints: { 'tools/list': { ttlMs: 60_000, cacheScope: 'public' } },
    },
  );
  for (const [name, [description, result]] of Object.entries(fx.STATIC_TOOLS)) {
    server.registerTool(name, { description, inputSchema: {} }, () => structuredClone(result) as never);
  }
  server.registerTool('test_tool_with_progress', { description: 'reports progress', inputSchema: {} }, async (_args, ctx) => {
    const progressToken = ctx.mcpReq._meta?.progressToken;
    for (const [i, progress] of fx.PROGRESS_STEPS.entries()) {
      if (i > 0) await delay(fx.STEP_MS);
      if (progressToken !== undefined) await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
    }
    return { content: [fx.text('Progress tool completed')] };
  });
  server.registerTool('test_logging_tool', { description: 'logs once, when asked to', inputSchema: {} }, async (_args, ctx) => {
    await ctx.mcpReq.log('info', 'test_logging_tool ran');
    return { content: [fx.text('Logged')] };
  });
  // Asking for sampling input that the client did not declare: the SDK answers -32021.
  server.registerTool('test_missing_capability', { description: 'needs the sampling capability', inputSchema: {} }, (_args, ctx) =>
    ctx.mcpReq.inputResponses?.['answer'] === undefined ? inputRequired({ inputRequests: { answer: samplingRequest('Reply with one word') } }) : { content: [fx.text('sampled')] },
  );
  server.registerTool('test_streaming_elicitation', { description: 'answers on a stream with no request of its own', inputSchema: {} }, () => ({
    content: [fx.text('streamed')],
  }));
  server.registerTool('test_trigger_tool_change', { description: 'changes the tool list', inputSchema: {} }, async () => {
    await changed('tools');
    return { content: [fx.text('tools changed')] };
  });
  server.registerTool('test_trigger_prompt_change', { description: 'changes the prompt list', inputSchema: {} }, async () => {
    await changed('prompts');
    return { content: [fx.text('prompts changed')] };
  });
  server.registerTool('test_input_required_result_elicitation', { description: 'asks for a name', inputSchema: {} }, (_args, ctx) => {
    const name = acceptedContent<{ name: string }>(ctx.mcpReq.inputResponses, 'user_name')?.name;
    return name === undefined ? inputRequired({ inputRequests: { user_name: nameRequest('What is your name?') } }) : { content: [fx.text(`Hello, ${name}!`)] };
  });
  server.registerTool('test_input_required_result_request_state', { description: 'round-trips its state', inputSchema: {} }, (_args, ctx) => {
    const state = ctx.mcpReq.requestState<State>();
    if (state === undefined) return inputRequired({ inputRequests: { confirm: confirmRequest() }, requestState: signState({ round: 1 }) });
    return state['round'] === 1 ? { content: [fx.text('state-ok')] } : { isError: true, content: [fx.text('bad requestState')] };
  });
  server.registerTool('test_input_required_result_multi_round', { description: 'asks twice', inputSchema: {} }, (_args, ctx) => {
    const state = ctx.mcpReq.requestState<State>();
    if (state === undefined) return inputRequired({ inputRequests: { step1: nameRequest('Step 1: What is your name?') }, requestState: signState({ round: 1 }) });
    if (state.round === 1) {
      const name = acceptedContent<{ name: string }>(ctx.mcpReq.inputResponses, 'step1')?.name ?? 'unknown';
      return inputRequired({
        inputRequests: {
          step2: inputRequired.elicit({
            message: 'Step 2: What is your favorite color?',
            requestedSchema: { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] },
          }),
        },
        requestState: signState({ round: 2, name }),
      });
    }
    const color = acceptedContent<{ color: string }>(ctx.mcpReq.inputResponses, 'step2')?.color ?? 'unknown';
    return { content: [fx.text(`${String(state['name'])} likes ${color}`)] };
  });
  server.registerTool('test_input_required_result_sampling', { description: 'asks the client to sample', inputSchema: {} }, (_args, ctx) => {
    const answer = inputResponse(ctx.mcpReq.inputResponses, 'capital_question');
    return answer.kind === 'sampling'
      ? { content: [fx.text(`Sampled: ${JSON.stringify(answer.result.content)}`)] }
      : inputRequired({ inputRequests: { capital_question: samplingRequest('What is the capital of France?') } });
  });
  server.registerTool('test_input_required_result_list_roots', { description: 'asks for the roots', inputSchema: {} }, (_args, ctx) => {
    const answer = inputResponse(ctx.mcpReq.inputResponses, 'client_roots');
    return answer.kind === 'roots'
      ? { content: [fx.text(`Client exposed ${answer.roots.length} root(s): ${answer.roots.map((root) => root.uri).join(', ')}`)] }
      : inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
  });
  server.registerTool('test_input_required_result_multiple_inputs', { description: 'asks for three inputs at once', inputSchema: {} }, (_args, ctx) => {
    const responses = ctx.mcpReq.inputResponses ?? {};
    if (['user_name', 'greeting', 'client_roots'].every((key) => responses[key] !== undefined) && ctx.mcpReq.requestState<State>() !== undefined) {
      return { content: [fx.text('All inputs received')] };
    }
    return inputRequired({
      inputRequests: {
        user_name: nameRequest('What is your name?'),
        greeting: inputRequired.createMessage({ messages: [{ role: 'user', content: fx.text('Generate a greeting') }], maxTokens: 50 }),
        client_roots: inputRequired.listRoots(),
      },
      requestState: signState({ round: 1 }),
    });
  });
  server.registerTool('test_input_required_result_tampered_state', { description: 'signs its state', inputSchema: {} }, (_args, ctx) => {
    const state = ctx.mcpReq.requestState<State>();
    return state === undefined ? inputRequired({ inputRequests: { confirm: confirmRequest() }, requestState: signState({ round: 1 }) }) : { content: [fx.text('state-ok')] };
  });
  server.registerTool('test_input_required_result_capabilities', { description: 'asks only for what the client declared', inputSchema: {} }, (_args, ctx) => {
    if (ctx.mcpReq.inputResponses !== undefined) return { content: [fx.text('Declared inputs received')] };
    const declared = (ctx.mcpReq.envelope as Record<string, { elicitation?: unknown; sampling?: unknown; roots?: unknown } | undefined> | undefined)?.[
      CLIENT_CAPABILITIES_META_KEY
    ];
    const inputRequests: InputRequests = {};
    if (declared?.elicitation !== undefined) inputRequests['user_name'] = nameRequest('What is your name?');
    if (declared?.sampling !== undefined) inputRequests['greeting'] = samplingRequest('Generate a short greeting');
    if (declared?.roots !== undefined) inputRequests['client_roots'] = inputRequired.listRoots();
    return Object.keys(inputRequests).length === 0 ? { content: [fx.text('Nothing declared to ask for')] } : inputRequired({ inputRequests });
  });
  server.registerPrompt('test_input_required_result_prompt', { description: 'asks for context first' }, (ctx) => {
    const context = acceptedContent<{ context: string }>(ctx.mcpReq.inputResponses, 'user_context')?.context;
    if (context !== undefined) return { messages: [{ role: 'user', content: fx.text(`Context: ${context}`) }] };
    return inputRequired({
      inputRequests: {
        user_context: inputRequired.elicit({
          message: 'What context should the prompt use?',
          requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] },
        }),
      },
    });
  });
  const cacheable = { cacheHint: { ttlMs: 60_000, cacheScope: 'public' as const } };
  server.registerResource('static-text', fx.STATIC_TEXT.uri, { description: 'a static text resource', mimeType: 'text/plain', ...cacheable }, () => ({
    contents: [fx.STATIC_TEXT],
  }));
  server.registerResource('static-binary', fx.STATIC_BINARY.uri, { description: 'a static binary resource', mimeType: 'image/png' }, () => ({
    contents: [fx.STATIC_BINARY],
  }));
  server.registerResource(
    'template',
    new ResourceTemplate(fx.TEMPLATE, { list: undefined }),
    { description: 'a resource template', mimeType: 'application/json' },
    (uri, variables) => ({ contents: [fx.templateContents(uri.href, String(variables['id']))] }),
  );
  server.registerPrompt('test_simple_prompt', { description: 'a simple prompt' }, fx.simplePrompt);
  server.registerPrompt(
    'test_prompt_with_arguments',
    { description: 'a prompt with arguments', argsSchema: z.object({ arg1: completable(z.string(), fx.completeArg), arg2: z.string() }) },
    ({ arg1, arg2 }) => fx.promptWithArguments(arg1, arg2),
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'embeds a resource', argsSchema: z.object({ resourceUri: z.string() }) },
    ({ resourceUri }) => fx.promptWithResource(resourceUri),
  );
  server.registerPrompt('test_prompt_with_image', { description: 'a prompt with an image' }, fx.promptWithImage);
  return server;
}

const nameRequest = (message: string) =>
  inputRequired.elicit({ message, requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } });
const samplingRequest = (question: string) => inputRequired.createMessage({ messages: [{ role: 'user', content: fx.text(question) }], maxTokens: 100 });
const confirmRequest = () =>
  inputRequired.elicit({ message: 'Please confirm', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } });

/**
 * The state travels with the client, so any replica of the fleet can take the next round: signed
 * with a key the fleet shares (a real fleet would configure it; here it is fixed).
 */
const STATE_KEY = 'conformance fixture fleet state key';

function signState(state: Record<string, unknown>): string {
  const payload = Buffer.from(JSON.stringify(state)).toString('base64url');
  return `${payload}.${createHmac('sha256', STATE_KEY).update(payload).digest('base64url')}`;
}

type State = Record<string, unknown>;

function verifyState(raw: string): State {
  const [payload, mac] = raw.split('.');
  if (payload === undefined || mac !== createHmac('sha256', STATE_KEY).update(payload).digest('base64url')) throw new Error('requestState: bad signature');
  return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as State;
}

function serve2026(): (req: IncomingMessage, res: ServerResponse, body: Buffer) => Promise<void> {
  const handler: McpHttpHandler = createMcpHandler(v2Server, { keepAliveMs: 0 });
  publishLocally = (list) => (list === 'tools' ? handler.notify.toolsChanged() : handler.notify.promptsChanged());
  return async (req, res, body) => {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) headers.append(name, v);
    }
    const aborted = new AbortController();
    res.once('close', () => aborted.abort());
    const method = req.method ?? 'GET';
    const request = new Request(new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`), {
      method,
      headers,
      body: method === 'GET' || method === 'HEAD' ? undefined : body,
      signal: aborted.signal,
    });
    const response = hostHeaderValidationResponse(request, localhostAllowedHostnames()) ?? (await handler.fetch(request));
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) {
      res.end();
      return;
    }
    const reader = response.body.getReader();
    res.once('close', () => void reader.cancel().catch(() => undefined));
    for (;;) {
      const { done, value } = await reader.read();
      if (done || res.destroyed) break;
      res.write(value);
    }
    res.end();
  };
}

let listeningPort = 0;
const handle2025 = era === '2025' ? serve2025(() => listeningPort) : undefined;
const handle2026 = era === '2026' ? serve2026() : undefined;

async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1');
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  if (url.pathname === '/control/changed') {
    const list = url.searchParams.get('list');
    if (list === 'tools' || list === 'prompts') publishLocally(list);
    res.writeHead(204).end();
    return;
  }
  if (handle2025) {
    let parsed: unknown;
    try {
      parsed = body.length === 0 ? undefined : JSON.parse(body.toString('utf8'));
    } catch {
      parsed = undefined;
    }
    await handle2025(req, res, parsed);
  } else await handle2026!(req, res, body);
}

const http = createServer((req, res) => {
  serve(req, res).catch((err: unknown) => {
    process.stderr.write(`conformance server ${id}: ${String(err)}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });
});
http.listen(Number(values.port), '127.0.0.1', () => {
  const address = http.address();
  listeningPort = typeof address === 'object' && address ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ event: 'listening', id, port: listeningPort, url: `http://127.0.0.1:${listeningPort}/mcp`, pid: process.pid })}\n`);
});
