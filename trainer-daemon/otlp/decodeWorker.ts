/**
 * OTLP decoding off the daemon's main thread (bundled to dist/otlp-worker.js): the main thread
 * keeps serving requests and committing spans while workers turn exports into spans, scrubbed and
 * serialized as the store writes them (prepare.ts).
 *
 * A decoded export goes back one part at a time (parts.ts), each when the main thread asks for it
 * (`next`), after it committed the one before: the main thread's work for one export, however
 * large, then comes in slices with its other requests in between, and the export waits here. The
 * last part is `last` (a part and `done` in one message; most exports are one part), so the worker
 * decodes the next export while that part is committed, and the main thread asks for nothing more.
 */
import { parentPort } from 'node:worker_threads';
import { assertNever } from '../protocol/assert';
import { asInputError, decodeTraceRequest } from './decode';
import { normalizeTraceRequest, type NormalizedSpan, type RejectedSpan } from './normalize';
import { splitIntoParts } from './parts';
import { ExportPreparer, packPart, type ExportSecrets, type PartMessage } from './prepare';

/** What one export may hold: bytes once decompressed, and spans. */
export interface DecodeLimits {
  readonly maxBytes: number;
  readonly maxSpans: number;
}

export type DecodeRequest =
  | {
      readonly kind: 'decode';
      readonly id: number;
      /** The body in chunks (an inflated gzip's as they came out), joined here rather than on the main thread. */
      readonly body: readonly Uint8Array[];
      readonly contentType: string | undefined;
      readonly contentEncoding: string | undefined;
      readonly limits: DecodeLimits;
      /** What its spans are scrubbed with here (prepare.ts). */
      readonly scrub: ExportSecrets;
    }
  /** The next part of export `id`; `drop` discards the rest. */
  | { readonly kind: 'next' | 'drop'; readonly id: number };

export type DecodeReply =
  | { readonly kind: 'part'; readonly id: number; readonly part: PartMessage }
  /** The export's last part, and the spans that could not be read: the export is done. */
  | { readonly kind: 'last'; readonly id: number; readonly part: PartMessage; readonly rejected: RejectedSpan[] }
  /** Done without a part (an export with no span to store). */
  | { readonly kind: 'done'; readonly id: number; readonly rejected: RejectedSpan[] }
  | { readonly kind: 'failed'; readonly id: number; readonly error: { name: string; message: string } };

/** The export being handed out: its parts not yet asked for. One at a time: the pool gives a worker one export. */
let current: { id: number; parts: NormalizedSpan[][]; rejected: RejectedSpan[]; preparer: ExportPreparer } | undefined;

/** The chunks as one Buffer (a single chunk as it is, without a copy). */
function joined(chunks: readonly Uint8Array[]): Buffer {
  const buffers = chunks.map((chunk) => Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  return buffers.length === 1 ? buffers[0]! : Buffer.concat(buffers);
}

function reply(message: DecodeReply): void {
  parentPort!.postMessage(message);
}

function failed(id: number, error: unknown): void {
  const mapped = asInputError(error);
  const { name, message } = mapped instanceof Error ? mapped : { name: 'Error', message: String(mapped) };
  reply({ kind: 'failed', id, error: { name, message } });
}

function sendNext(id: number): void {
  if (current?.id !== id) return;
  const spans = current.parts.shift();
  let part;
  try {
    // Prepared as it is sent: one part's strings at a time beside the decoded export.
    part = spans && packPart(current.preparer.part(spans));
  } catch (error) {
    current = undefined;
    return failed(id, error);
  }
  if (part && current.parts.length > 0) return reply({ kind: 'part', id, part });
  // The last part ends the export in the same message: this worker is then free to decode the next export while the
  // main thread commits that part.
  reply(
    part ? { kind: 'last', id, part, rejected: current.rejected } : { kind: 'done', id, rejected: current.rejected },
  );
  current = undefined;
}

parentPort?.on('message', (request: DecodeRequest) => {
  switch (request.kind) {
    case 'decode':
      try {
        const body = joined(request.body);
        const { spans, rejected } = normalizeTraceRequest(
          decodeTraceRequest(
            body,
            request.contentType,
            request.contentEncoding,
            request.limits.maxBytes,
            request.limits.maxSpans,
          ),
        );
        current = {
          id: request.id,
          parts: splitIntoParts(spans),
          rejected,
          preparer: new ExportPreparer(request.scrub),
        };
        sendNext(request.id);
      } catch (error) {
        failed(request.id, error);
      }
      return;
    case 'next':
      sendNext(request.id);
      return;
    case 'drop':
      if (current?.id === request.id) current.parts = [];
      sendNext(request.id);
      return;
    default:
      assertNever(request);
  }
});
