/**
 * Reading an HTTP answer whose size the other side decides (a policy server, the proxy's answer to APO) with a cap
 * counted as the bytes arrive: `await response.text()` buffers whatever comes, and one answer of gigabytes would
 * take the process's memory with it.
 */
import { LightningError } from '../protocol/errors';

/**
 * A non-streamed LLM answer is JSON of at most a few MB: past this it is refused, not buffered (docs/guarantees.md;
 * LIGHTNING_MAX_UPSTREAM_BODY_BYTES, read with the daemon's other limits: limits.ts).
 */
export const DEFAULT_MAX_UPSTREAM_BODY_BYTES = 64 * 1024 * 1024;

/** An answer was over the byte limit: reading stopped there and the rest was not taken. */
export class BodyOverLimitError extends LightningError {
  constructor(readonly limit: number) {
    super(
      `the answer is over the ${limit}-byte limit for a non-streamed answer (LIGHTNING_MAX_UPSTREAM_BODY_BYTES); Lightning stopped reading it`,
    );
  }
}

/** The body as text, read up to `limit` bytes; past it the body is cancelled and BodyOverLimitError thrown. */
export async function boundedText(response: Response, limit: number): Promise<string> {
  const declared = Number(response.headers.get('content-length') ?? Number.NaN);
  if (declared > limit) {
    await response.body?.cancel().catch(() => undefined);
    throw new BodyOverLimitError(limit);
  }
  if (!response.body) return '';
  // Node's fetch types its body's chunks as any: they are bytes.
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      throw new BodyOverLimitError(limit);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}
