/** HTTP as bytes on a plain TCP socket: requests Node's own client refuses to send (bad headers, half a header block). */
import { connect, type Socket } from 'node:net';

/** Opens a socket to `url`'s host and port and resolves once connected. */
export function openSocket(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Resolves with everything the peer sent once the socket closed (errors count as a close). */
export function readUntilClosed(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
  });
}

/** Sends `bytes` and resolves with the whole answer, once the gateway closed the connection. */
export async function rawExchange(url: string, bytes: string | Buffer): Promise<string> {
  const socket = await openSocket(url);
  const answer = readUntilClosed(socket);
  socket.write(bytes);
  return answer;
}

/** The status code of a raw HTTP answer (0: none). */
export function rawStatus(answer: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
}
