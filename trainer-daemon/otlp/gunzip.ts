/**
 * An OTLP body's gzip, inflated on the event loop's thread pool a chunk at a time, with the cap checked
 * as each chunk comes out: a gzip bomb stops at the cap having held at most the cap, the main thread
 * never blocks on it, and an export whose client left stops inflating at once.
 */
import zlib from 'node:zlib';
import { InvalidInputError, PayloadTooLargeError } from '../protocol/errors';

/** The client went away: its export's work stopped, and there is nobody to answer. */
export class ExportCancelledError extends Error {}

/**
 * The body as the decoder reads it, in chunks: inflated when `contentEncoding` is gzip (then `identity`), the
 * body itself otherwise. The chunks are joined by the decoder, off this thread (joining 128 MiB here held the
 * event loop half a second). `take` counts the inflated bytes as they come (it throws past a budget).
 */
export async function inflateBody(
  body: Buffer,
  contentEncoding: string | undefined,
  maxBytes: number,
  options: { signal?: AbortSignal; take?: (bytes: number) => void } = {},
): Promise<{ chunks: Buffer[]; contentEncoding: string | undefined }> {
  const encoding = (contentEncoding ?? '').trim().toLowerCase();
  if (encoding !== 'gzip') return { chunks: [body], contentEncoding };
  const chunks: Buffer[] = [];
  let size = 0;
  // Taken from the budget a slice at a time (the budget gives it all back when the response closes).
  let untaken = 0;
  const TAKE_STEP = 4 * 1024 * 1024;
  const inflated = await new Promise<Buffer[]>((resolve, reject) => {
    const gunzip = zlib.createGunzip({ chunkSize: 256 * 1024 });
    const stop = (error: Error): void => {
      gunzip.removeAllListeners('data');
      gunzip.destroy();
      options.signal?.removeEventListener('abort', cancelled);
      reject(error);
    };
    const cancelled = (): void => stop(new ExportCancelledError('the client disconnected before its export was read'));
    if (options.signal?.aborted) return cancelled();
    options.signal?.addEventListener('abort', cancelled, { once: true });
    gunzip.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes)
        return stop(
          new PayloadTooLargeError(
            `OTLP body is over the ${maxBytes}-byte limit once decompressed; export smaller batches`,
          ),
        );
      untaken += chunk.length;
      try {
        if (untaken >= TAKE_STEP) options.take?.(untaken);
        if (untaken >= TAKE_STEP) untaken = 0;
      } catch (error) {
        return stop(error as Error);
      }
      chunks.push(chunk);
    });
    gunzip.on('error', (error) => stop(new InvalidInputError(`OTLP body is not valid gzip (${error.message})`)));
    gunzip.on('end', () => {
      options.signal?.removeEventListener('abort', cancelled);
      try {
        if (untaken > 0) options.take?.(untaken);
      } catch (error) {
        reject(error);
        return;
      }
      resolve(chunks);
    });
    gunzip.end(body);
  });
  return { chunks: inflated, contentEncoding: 'identity' };
}
