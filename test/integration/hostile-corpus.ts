/**
 * The hostile corpus: requests as bytes on a raw socket, each sent to a gateway and to its replica
 * directly (hostile-corpus.test.ts). Ideas from aws/http-desync-guardian's test cases and llhttp's
 * tests; the cases are written for this gateway. `{session}` is replaced by a live session of
 * the peer the case is sent to. What every case must show is in docs/security.md
 * "Hostile requests".
 */
import { initializeBody, PROTOCOL_VERSION, toolCallBody } from '../helpers/http.js';

/** What the client does, in order: writes bytes, waits, or closes its side (a half-close). */
export type Step = string | { pauseMs: number } | { end: true };

export interface HostileCase {
  name: string;
  send: Step[];
  /** Final responses the client waits for before it leaves (default 1); fewer come if the peer closes. */
  responses?: number;
  /** How long the client waits for them before it gives up and closes (default 1500 ms). */
  giveUpMs?: number;
  /** Headers the replica must not receive through the gateway, besides those named in Connection. */
  notForwarded?: string[];
  /** Headers the replica must receive through the gateway: the recording it answers is live. */
  forwarded?: string[];
  /** Values the client sent that must not reach the replica through the gateway (a header the gateway writes itself). */
  absent?: string[];
}

export interface Family {
  family: string;
  cases: HostileCase[];
}

const RECORD = toolCallBody('request_headers');
const MCP_HEADERS = [
  'Host: corpus.test',
  'Content-Type: application/json',
  'Accept: application/json, text/event-stream',
  `MCP-Protocol-Version: ${PROTOCOL_VERSION}`,
  'Mcp-Session-Id: {session}',
];

function head(line: string, headers: readonly string[]): string {
  return `${line}\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n`;
}

/** A tools/call of request_headers (the replica answers with the headers it received) on the session. */
function call(extra: readonly string[] = [], body = RECORD, line = 'POST /mcp HTTP/1.1'): string {
  return head(line, [...MCP_HEADERS, ...extra, `Content-Length: ${Buffer.byteLength(body)}`]) + body;
}

/** The same call with `framing` in place of a Content-Length that fits, and `body` as given. */
function framed(framing: readonly string[], body: string, line = 'POST /mcp HTTP/1.1'): string {
  return head(line, [...MCP_HEADERS, ...framing]) + body;
}

function chunked(body: string): string {
  return `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
}

/** A plain request with no MCP headers. */
function plain(line: string, headers: readonly string[] = ['Host: corpus.test'], body = ''): string {
  return head(line, headers) + body;
}

const SMUGGLED = plain('GET /mcp HTTP/1.1', ['Host: corpus.test', 'X-Smuggled: 1']);
const GET_STREAM = head('GET /mcp HTTP/1.1', ['Host: corpus.test', 'Accept: text/event-stream', `MCP-Protocol-Version: ${PROTOCOL_VERSION}`, 'Mcp-Session-Id: {session}']);

export const CORPUS: Family[] = [
  {
    family: 'smuggling',
    cases: [
      { name: 'CL.TE: Content-Length and chunked together', send: [framed([`Content-Length: 6`, 'Transfer-Encoding: chunked'], `0\r\n\r\n${SMUGGLED}`)] },
      { name: 'TE.CL: chunked and a short Content-Length', send: [framed(['Transfer-Encoding: chunked', 'Content-Length: 4'], `${chunked(RECORD)}${SMUGGLED}`)] },
      { name: 'two equal Content-Length fields', send: [framed([`Content-Length: ${RECORD.length}`, `Content-Length: ${RECORD.length}`], RECORD)] },
      { name: 'two differing Content-Length fields', send: [framed([`Content-Length: ${RECORD.length}`, `Content-Length: ${RECORD.length - 10}`], RECORD)] },
      { name: 'a Content-Length list', send: [framed([`Content-Length: ${RECORD.length}, ${RECORD.length}`], RECORD)] },
      { name: 'Content-Length with a plus sign', send: [framed([`Content-Length: +${RECORD.length}`], RECORD)] },
      { name: 'a negative Content-Length', send: [framed(['Content-Length: -1'], RECORD)] },
      { name: 'Content-Length in hexadecimal', send: [framed([`Content-Length: 0x${RECORD.length.toString(16)}`], RECORD)] },
      { name: 'Content-Length with leading zeros', send: [framed([`Content-Length: 000${RECORD.length}`], RECORD)] },
      { name: 'Content-Length past 2^64', send: [framed(['Content-Length: 99999999999999999999999'], RECORD)] },
      { name: 'Transfer-Encoding: xchunked', send: [framed(['Transfer-Encoding: xchunked'], chunked(RECORD))] },
      { name: 'Transfer-Encoding with a space before the colon', send: [framed(['Transfer-Encoding : chunked'], chunked(RECORD))] },
      { name: 'Transfer-Encoding: chunked, identity', send: [framed(['Transfer-Encoding: chunked, identity'], chunked(RECORD))] },
      { name: 'Transfer-Encoding: identity, chunked', send: [framed(['Transfer-Encoding: identity, chunked'], chunked(RECORD))] },
      { name: 'Transfer-Encoding in upper case, after a tab', send: [framed(['Transfer-Encoding:\tCHUNKED'], chunked(RECORD))] },
      { name: 'Transfer-Encoding after a vertical tab', send: [framed(['Transfer-Encoding: \x0bchunked'], chunked(RECORD))] },
      { name: 'two Transfer-Encoding fields, the second not chunked', send: [framed(['Transfer-Encoding: chunked', 'Transfer-Encoding: x'], chunked(RECORD))] },
      { name: 'Transfer-Encoding folded onto a second line (obs-fold)', send: [framed(['Transfer-Encoding:', ' chunked'], chunked(RECORD))] },
      { name: 'Transfer-Encoding on an HTTP/1.0 request', send: [framed(['Transfer-Encoding: chunked'], chunked(RECORD), 'POST /mcp HTTP/1.0')] },
      { name: 'a bare CR inside a header line', send: [framed([`X-Split: a\rTransfer-Encoding: chunked`, `Content-Length: ${RECORD.length}`], RECORD)] },
      { name: 'a bare LF ending a header line', send: [framed([`X-Split: a\nTransfer-Encoding: chunked`, `Content-Length: ${RECORD.length}`], RECORD)] },
      { name: 'bare LF line endings throughout', send: [call().replaceAll('\r\n', '\n')] },
      { name: 'an ordinary header folded (obs-fold)', send: [call(['X-Folded: a', ' b'])] },
      { name: 'a NUL in a header value', send: [call(['X-Nul: a\x00b'])] },
      { name: 'a header name with a space', send: [call(['X Spaced: 1'])] },
      { name: 'a header line with no colon', send: [call(['X-No-Colon'])] },
      { name: 'an empty header name', send: [call([': 1'])] },
      { name: 'whitespace before the first header line', send: [call().replace('\r\nHost:', '\r\n Host:')] },
      { name: 'obs-text bytes in a header value', send: [call(['X-Latin: caf\xe9 \xff'])] },
      { name: 'a header name of every token symbol', send: [call(["X-!#$%&'*+.^_`|~: 1"])] },
      { name: 'Content-Length with trailing whitespace', send: [framed([`Content-Length: ${RECORD.length} \t`], RECORD)] },
      { name: 'two differing Mcp-Session-Id fields', send: [call(['Mcp-Session-Id: another-session'])] },
      { name: 'a chunk size in hexadecimal with 0x', send: [framed(['Transfer-Encoding: chunked'], `0x${RECORD.length.toString(16)}\r\n${RECORD}\r\n0\r\n\r\n`)] },
      { name: 'a chunk size past 2^64', send: [framed(['Transfer-Encoding: chunked'], `fffffffffffffffffffff\r\n${RECORD}\r\n0\r\n\r\n`)] },
      { name: 'a chunk extension and a trailer field', send: [framed(['Transfer-Encoding: chunked'], `${RECORD.length.toString(16)};ext="x"\r\n${RECORD}\r\n0\r\nX-Trailer: 1\r\n\r\n`)] },
      { name: 'a chunk whose data overruns its size', send: [framed(['Transfer-Encoding: chunked'], `5\r\n${RECORD}\r\n0\r\n\r\n`)] },
      { name: 'a chunk ended by a bare LF', send: [framed(['Transfer-Encoding: chunked'], `${RECORD.length.toString(16)}\n${RECORD}\n0\n\n`)] },
      { name: 'two Host fields', send: [call(['Host: other.test'])] },
      { name: 'HTTP/1.1 without Host', send: [plain('POST /mcp HTTP/1.1', MCP_HEADERS.slice(1).concat(`Content-Length: ${RECORD.length}`), RECORD)] },
    ],
  },
  {
    family: 'hop-by-hop',
    cases: [
      {
        name: 'Connection names private headers',
        send: [call(['Connection: keep-alive, X-Hop-One, x-hop-two', 'X-Hop-One: 1', 'X-Hop-Two: 2', 'X-End-To-End: 3'])],
        forwarded: ['x-end-to-end'],
      },
      {
        name: 'Connection lists over two fields, odd case and spacing',
        send: [call(['Connection: X-HOP-ONE ,', 'connection:  ,x-Hop-Two\t', 'X-Hop-One: 1', 'x-hop-two: 2', 'X-End-To-End: 3'])],
        forwarded: ['x-end-to-end'],
      },
      {
        name: 'every hop-by-hop header of RFC 9110',
        send: [
          call([
            'Connection: keep-alive, Upgrade, HTTP2-Settings',
            'Keep-Alive: timeout=5',
            'Proxy-Connection: keep-alive',
            'TE: trailers',
            'Trailer: X-Checksum',
            'Upgrade: h2c',
            'HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA',
            'Proxy-Authorization: Basic eDp5',
            'X-End-To-End: 3',
          ]),
        ],
        notForwarded: ['keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade', 'http2-settings', 'proxy-authorization'],
        forwarded: ['x-end-to-end'],
      },
      { name: 'Connection names Mcp-Session-Id', send: [call(['Connection: keep-alive, Mcp-Session-Id'])] },
      { name: 'Connection names Content-Length', send: [call(['Connection: Content-Length'])], forwarded: ['content-type'] },
      { name: 'Connection names Transfer-Encoding on a chunked body', send: [framed(['Connection: Transfer-Encoding', 'Transfer-Encoding: chunked'], chunked(RECORD))] },
      { name: 'Connection names Host', send: [call(['Connection: Host'])] },
      { name: 'Connection names X-Forwarded-For', send: [call(['Connection: X-Forwarded-For', 'X-Forwarded-For: 203.0.113.9'])], absent: ['203.0.113.9'] },
      { name: 'Connection: close with a private header', send: [call(['Connection: close, X-Hop-One', 'X-Hop-One: 1', 'X-End-To-End: 3'])], forwarded: ['x-end-to-end'] },
      { name: 'TE: trailers alone', send: [call(['TE: trailers'])], notForwarded: ['te'] },
      { name: 'Connection with an empty list', send: [call(['Connection: ,,', 'X-End-To-End: 3'])], forwarded: ['x-end-to-end'] },
      {
        name: 'an Upgrade to WebSocket',
        send: [head('GET /mcp HTTP/1.1', ['Host: corpus.test', 'Connection: Upgrade', 'Upgrade: websocket', 'Sec-WebSocket-Version: 13', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='])],
      },
    ],
  },
  {
    family: 'expect',
    cases: [
      { name: 'Expect: 100-continue with the body at once', send: [call(['Expect: 100-continue'])], notForwarded: ['expect'] },
      {
        name: 'Expect: 100-continue, the body after a pause',
        send: [call(['Expect: 100-continue']).split('\r\n\r\n')[0] + '\r\n\r\n', { pauseMs: 200 }, RECORD],
        notForwarded: ['expect'],
      },
      { name: 'Expect: 100-continue on a body over the limit', send: [framed(['Expect: 100-continue', 'Content-Length: 5000000'], '')] },
      { name: 'Expect: 100-continue with no body', send: [framed(['Expect: 100-continue', 'Content-Length: 0'], '')] },
      { name: 'Expect: 100-continue on a GET', send: [head('GET /mcp HTTP/1.1', ['Host: corpus.test', 'Expect: 100-continue', 'Mcp-Session-Id: no-such-session'])] },
      { name: 'an expectation other than 100-continue', send: [call(['Expect: 200-ok'])] },
      { name: 'Expect named in Connection', send: [call(['Connection: Expect', 'Expect: 100-continue'])], notForwarded: ['expect'] },
    ],
  },
  {
    family: 'size',
    cases: [
      { name: 'one header of 20 KB', send: [call([`X-Huge: ${'a'.repeat(20_000)}`])] },
      { name: 'a header block just under the bound', send: [call([`X-Large: ${'a'.repeat(15_600)}`])] },
      { name: '1,000 distinct headers', send: [call(Array.from({ length: 1000 }, (_, i) => `X-H${i}: ${i}`))] },
      { name: '2,500 repeats of one header (past the parser count)', send: [call(Array.from({ length: 2500 }, () => 'X: 1'))] },
      { name: 'a Mcp-Session-Id of 10 KB', send: [call([]).replace('Mcp-Session-Id: {session}', `Mcp-Session-Id: ${'s'.repeat(10_000)}`)] },
      { name: 'a Last-Event-ID of 12 KB on a GET', send: [GET_STREAM.replace('\r\n\r\n', `\r\nLast-Event-ID: ${'e'.repeat(12_000)}\r\n\r\n`)], giveUpMs: 1000 },
      { name: 'a request target of 20 KB', send: [plain(`GET /mcp?${'q'.repeat(20_000)} HTTP/1.1`)] },
    ],
  },
  {
    family: 'targets and methods',
    cases: [
      { name: 'OPTIONS *', send: [plain('OPTIONS * HTTP/1.1')] },
      { name: 'absolute-form target', send: [call([], RECORD, 'POST http://corpus.test/mcp HTTP/1.1')] },
      { name: 'absolute-form target of another host', send: [call([], RECORD, 'POST http://169.254.169.254/mcp HTTP/1.1')] },
      { name: 'authority-form target on a GET', send: [plain('GET corpus.test:80 HTTP/1.1')] },
      { name: 'a target with dot segments', send: [call([], RECORD, 'POST /x/../mcp HTTP/1.1')] },
      { name: 'a percent-encoded path', send: [call([], RECORD, 'POST /%6dcp HTTP/1.1')] },
      { name: 'a double slash', send: [call([], RECORD, 'POST //mcp HTTP/1.1')] },
      { name: 'a trailing slash and a query', send: [call([], RECORD, 'POST /mcp/?a=1&a=2 HTTP/1.1')] },
      { name: 'a fragment in the target', send: [call([], RECORD, 'POST /mcp#frag HTTP/1.1')] },
      { name: 'raw UTF-8 bytes in the target', send: [Buffer.from(plain('GET /mcp/\u00e9\u00e9 HTTP/1.1'), 'utf8').toString('latin1')] },
      { name: 'a space in the target', send: [plain('GET /m cp HTTP/1.1')] },
      { name: 'no leading slash', send: [plain('GET mcp HTTP/1.1')] },
      { name: 'an unknown method', send: [call([], RECORD, 'FOO /mcp HTTP/1.1')] },
      { name: 'a lower-case method', send: [call([], RECORD, 'post /mcp HTTP/1.1')] },
      { name: 'PROPFIND with a body', send: [call([], RECORD, 'PROPFIND /mcp HTTP/1.1')] },
      { name: 'PATCH with a body', send: [call([], RECORD, 'PATCH /mcp HTTP/1.1')] },
      { name: 'PUT with a body', send: [call([], RECORD, 'PUT /mcp HTTP/1.1')] },
      { name: 'TRACE', send: [plain('TRACE /mcp HTTP/1.1', ['Host: corpus.test', 'Mcp-Session-Id: {session}'])] },
      { name: 'HEAD of the session', send: [head('HEAD /mcp HTTP/1.1', ['Host: corpus.test', 'Accept: text/event-stream', 'Mcp-Session-Id: {session}', 'Connection: close'])] },
      { name: 'a GET with a body', send: [call([], RECORD, 'GET /mcp HTTP/1.1')], giveUpMs: 1000 },
      { name: 'a DELETE of an unknown session, with a body', send: [call([], RECORD, 'DELETE /mcp HTTP/1.1').replace('{session}', 'no-such-session')] },
      { name: 'CONNECT', send: [plain('CONNECT corpus.test:443 HTTP/1.1', ['Host: corpus.test:443'])] },
      { name: 'QUERY with a body', send: [call([], RECORD, 'QUERY /mcp HTTP/1.1')] },
      { name: 'the HTTP/2 preface', send: ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'] },
      { name: 'HTTP/1.2', send: [call([], RECORD, 'POST /mcp HTTP/1.2')] },
      { name: 'HTTP/2.0 in the request line', send: [call([], RECORD, 'POST /mcp HTTP/2.0')] },
      { name: 'HTTP/0.9 (no version)', send: ['GET /mcp\r\n'] },
      { name: 'two spaces in the request line', send: [call([], RECORD, 'POST  /mcp  HTTP/1.1')] },
      { name: 'junk after the version', send: [call([], RECORD, 'POST /mcp HTTP/1.1 junk')] },
    ],
  },
  {
    family: 'pipelining and HTTP/1.0',
    cases: [
      { name: 'two calls pipelined', send: [call() + call()], responses: 2 },
      {
        name: 'an initialize, a call and a close pipelined',
        send: [plain('POST /mcp HTTP/1.1', [...MCP_HEADERS.slice(0, 4), `Content-Length: ${initializeBody().length}`], initializeBody()) + call() + call(['Connection: close'])],
        responses: 3,
      },
      { name: 'a call, then garbage', send: [`${call()}BLAH\r\n\r\n`], responses: 2 },
      { name: 'a call, then half a request', send: [`${call()}POST /mcp HTTP/1.1\r\nHost: corp`], responses: 2 },
      { name: 'a GET stream, then a call behind it', send: [GET_STREAM + call()], responses: 2, giveUpMs: 1000 },
      { name: 'HTTP/1.0 without Host', send: [call([], RECORD, 'POST /mcp HTTP/1.0').replace('Host: corpus.test\r\n', '')] },
      { name: 'HTTP/1.0 with keep-alive, two pipelined', send: [call(['Connection: keep-alive'], RECORD, 'POST /mcp HTTP/1.0') + call([], RECORD, 'POST /mcp HTTP/1.0')], responses: 2 },
      { name: 'HTTP/1.0 GET stream', send: [GET_STREAM.replace('HTTP/1.1', 'HTTP/1.0')], giveUpMs: 1000 },
      { name: 'a half-close after a whole request', send: [call(), { end: true }] },
    ],
  },
  {
    family: 'slow clients',
    cases: [
      { name: 'headers a few bytes at a time, within the bound', send: trickle(call(), 8, 80) },
      { name: 'headers that stop halfway, past the bound', send: [call().slice(0, 60)], giveUpMs: 3500 },
      { name: 'a body a few bytes at a time', send: [call().slice(0, -RECORD.length), ...trickle(RECORD, 5, 120)] },
      { name: 'a chunked body one chunk at a time', send: [framed(['Transfer-Encoding: chunked'], ''), ...RECORD.match(/.{1,20}/g)!.flatMap((c) => [{ pauseMs: 60 }, `${c.length.toString(16)}\r\n${c}\r\n`]), '0\r\n\r\n'] },
    ],
  },
  {
    family: 'bodies',
    cases: [
      { name: 'a body longer than its Content-Length', send: [framed([`Content-Length: ${RECORD.length - 5}`], RECORD)], responses: 2 },
      { name: 'a body shorter than its Content-Length, then waiting', send: [framed([`Content-Length: ${RECORD.length + 50}`], RECORD)], giveUpMs: 800 },
      { name: 'a close in mid-body', send: [framed([`Content-Length: ${RECORD.length}`], RECORD.slice(0, 20)), { end: true }] },
      { name: 'a close in mid-chunk', send: [framed(['Transfer-Encoding: chunked'], `${RECORD.length.toString(16)}\r\n${RECORD.slice(0, 20)}`), { end: true }] },
      { name: 'a chunked body with no last chunk, then waiting', send: [framed(['Transfer-Encoding: chunked'], `${RECORD.length.toString(16)}\r\n${RECORD}\r\n`)], giveUpMs: 800 },
      { name: 'a POST with no body', send: [framed(['Content-Length: 0'], '')] },
      { name: 'a body that is not JSON', send: [call([], '{"jsonrpc":"2.0",')] },
      { name: 'a gzip Content-Encoding on a plain body', send: [call(['Content-Encoding: gzip'])] },
      { name: 'deeply nested JSON', send: [call([], `${'['.repeat(50_000)}${']'.repeat(50_000)}`)] },
      { name: 'a JSON-RPC batch', send: [call([], `[${RECORD},${toolCallBody('whoami', {}, 3)}]`)] },
      { name: 'two Content-Type fields, the second text/plain', send: [call(['Content-Type: text/plain'])] },
      { name: 'a wrong Content-Type', send: [call().replace('Content-Type: application/json', 'Content-Type: text/plain')] },
      { name: 'Content-Length: 0 followed by a request', send: [framed(['Content-Length: 0'], SMUGGLED)], responses: 2 },
      { name: 'a chunked body in 1-byte chunks', send: [framed(['Transfer-Encoding: chunked'], `${[...RECORD].map((c) => `1\r\n${c}\r\n`).join('')}0\r\n\r\n`)] },
      { name: 'Last-Event-ID on a POST', send: [call(['Last-Event-ID: abc'])], notForwarded: ['last-event-id'] },
    ],
  },
];

/** `bytes` in `pieces` writes `pauseMs` apart. */
function trickle(bytes: string, pieces: number, pauseMs: number): Step[] {
  const size = Math.ceil(bytes.length / pieces);
  return Array.from({ length: pieces }, (_, i) => [{ pauseMs }, bytes.slice(i * size, (i + 1) * size)] as Step[]).flat();
}
