/**
 * limits.bodyBytes, read on every request so that a reload applies it at once (fastify's own
 * bodyLimit is fixed when the instance is made). A declared Content-Length over the limit is
 * refused before a byte of the body is read; a chunked body is counted as it arrives.
 */
import { Transform } from 'node:stream';
import { errorCodes, type FastifyReply, type FastifyRequest, type RequestPayload } from 'fastify';

type Payload = RequestPayload;

function tooLarge(): Error {
  return new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE();
}

/** A fastify `preParsing` hook enforcing `limit()` bytes (413 above it, through the error handler). */
export function bodyLimitHook(limit: () => number) {
  return (request: FastifyRequest, _reply: FastifyReply, payload: Payload, done: (err: Error | null, body?: Payload) => void): void => {
    const max = limit();
    const declared = request.headers['content-length'];
    // Node's parser reads no more than a declared length, and fastify checks that it all came.
    if (declared !== undefined) return Number(declared) > max ? done(tooLarge()) : done(null, payload);
    let received = 0;
    const counted = new Transform({
      transform(chunk: Buffer, _encoding, next) {
        received += chunk.length;
        next(received > max ? tooLarge() : null, chunk);
      },
    });
    payload.pipe(counted);
    done(null, counted);
  };
}
