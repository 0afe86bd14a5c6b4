/**
 * OTLP/HTTP trace ingest: decode (protobuf or JSON, gzip or not), normalize, scrub and serialize
 * (those three in a decode worker), store through the group commit, and answer with OTLP's partial
 * success — the good spans of a batch are stored and the rejected ones counted and explained — in the
 * encoding the exporter used.
 */
import { errorMessage, OverloadedError, PayloadTooLargeError } from '../protocol/errors';
import type { SpanInput } from '../protocol';
import type { PreparedSpan } from '../protocol/preparedSpan';
import { rememberRolloutSecrets, secretsOf } from '../protocol/secrets';
import type { Logger } from '../log';
import type { WriteQueue } from '../store/writeQueue';
import { DecodePool, DEFAULT_DECODE_WORKER_HEAP_MB } from './decodePool';
import { ExportCancelledError, inflateBody } from './gunzip';
import type { PreparedPart } from './prepare';
import { writeExportResponse } from './protobuf';

export interface OtlpResponse {
  readonly contentType: string;
  readonly body: Buffer;
  readonly stored: number;
  readonly rejected: number;
}

function encodeResponse(binary: boolean, rejected: number, message: string): { contentType: string; body: Buffer } {
  if (binary) return { contentType: 'application/x-protobuf', body: writeExportResponse(rejected, message) };
  return {
    contentType: 'application/json',
    body: Buffer.from(
      JSON.stringify(
        rejected > 0 ? { partialSuccess: { rejectedSpans: String(rejected), errorMessage: message } } : {},
      ),
    ),
  };
}

export interface IngestOptions {
  /** Aborted when the exporter went away: the export's work stops (ExportCancelledError). */
  readonly signal?: AbortSignal;
  /** Counts the bytes inflated from a gzip body as they come (throws OverloadedError past the daemon's budget). */
  readonly take?: (bytes: number) => void;
  /**
   * The attempt whose key the export came with (to the rollout's URL, or with its key header): its spans for that
   * rollout are kept with it, marked late, if it is over by the time they are written (store/spans.ts).
   */
  readonly attempt?: number;
}

/** The decode queue's name for exports to the shared `/v1/traces` (no rollout in the URL). */
const SHARED_SOURCE = 'shared endpoint';

/** Whether a rollout takes spans now: why not, the attempt it runs, or undefined (unknown: the write says so). */
export type Admission = { readonly refused: string } | { readonly attempt: number } | undefined;

export class OtlpReceiver {
  private readonly pool: DecodePool;

  constructor(
    private readonly writes: WriteQueue,
    private readonly maxBytes: number,
    logger: Logger,
    /** Each decode worker's JavaScript heap, in MiB (decodePool.ts). */
    workerHeapMb = DEFAULT_DECODE_WORKER_HEAP_MB,
  ) {
    this.pool = new DecodePool({ logger, heapMb: workerHeapMb });
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  /**
   * Stores a trace export. `urlRolloutId` comes from the capability URL (`/r/<key>/v1/traces`) and
   * wins over span attributes; without one, each span's rollout is its `lightning.rollout_id`.
   * `admits` says whether a rollout takes spans now: why not (it has finished), or the attempt it runs — the attempt
   * spans without a key's are written for, so that one ending before they are committed marks them late. Throws
   * InvalidInputError (or
   * UnsupportedMediaTypeError) for a body that cannot be decoded, PayloadTooLargeError past the limits.
   *
   * The spans are committed part by part as the decoder hands them out, so other requests are served
   * between the parts of a large export. If a part cannot be written now (busy, a full disk), the
   * export is answered 503 to be retried whole: the spans already stored are not stored twice.
   */
  async ingest(
    urlRolloutId: string | null,
    body: Buffer,
    contentType: string | undefined,
    contentEncoding: string | undefined,
    admits: (rolloutId: string) => Admission = () => undefined,
    options: IngestOptions = {},
  ): Promise<OtlpResponse> {
    const limits = { maxBytes: this.maxBytes, maxSpans: this.writes.maxSpansPerWrite };
    // Inflated here, on the thread pool, against the cap as it comes out; the worker reads plain bytes.
    const plain = await inflateBody(body, contentEncoding, this.maxBytes, options);
    // Scrubbed where it is decoded with the secrets known as its decoding starts; the store refuses a part scrubbed
    // without one it knows by the write (protocol/preparedSpan.ts).
    const decoded = this.pool.decode(
      urlRolloutId ?? SHARED_SOURCE,
      plain.chunks,
      contentType,
      plain.contentEncoding,
      limits,
      () => ({ rolloutId: urlRolloutId, secrets: secretsOf(urlRolloutId) }),
    );
    const problems: string[] = [];
    let read = 0;
    let stored = 0;
    // A client that left stops its export: a decode still running ends its worker, no more parts are stored.
    const cancelled = (): void => decoded.close();
    options.signal?.addEventListener('abort', cancelled, { once: true });
    try {
      for (let part = await decoded.next(), index = 0; part !== null; part = await decoded.next(), index += 1) {
        if (options.signal?.aborted)
          throw new ExportCancelledError('the client disconnected before its export was stored');
        read += part.spans.length;
        // A later part of an export is committed at once: the span window, where small writes wait for
        // company (writeQueue.ts), would hold each large export's short last part 10 ms — and, since a
        // rollout's large exports decode one at a time (decodePool.ts), that rollout's next export with it.
        stored += await this.storePart(urlRolloutId, part, admits, problems, index > 0, options.attempt);
      }
    } finally {
      options.signal?.removeEventListener('abort', cancelled);
      decoded.close();
    }
    for (const { spanId, error } of decoded.rejected.slice(0, 5)) problems.push(`${spanId ?? 'span'}: ${error}`);
    const rejectedCount = read + decoded.rejected.length - stored;
    const binary = !(contentType ?? '').toLowerCase().includes('json');
    return {
      ...encodeResponse(binary, rejectedCount, problems.slice(0, 5).join('; ')),
      stored,
      rejected: rejectedCount,
    };
  }

  /** Stores one part's spans, by rollout; returns how many were stored and adds why others were not to `problems`. */
  private async storePart(
    urlRolloutId: string | null,
    part: PreparedPart,
    admits: (rolloutId: string) => Admission,
    problems: string[],
    urgent: boolean,
    attempt: number | undefined,
  ): Promise<number> {
    const byRollout = new Map<string, Array<PreparedSpan | SpanInput>>();
    for (const { rolloutId, span } of part.spans) {
      const target = urlRolloutId ?? rolloutId;
      if (target === null) {
        problems.push(
          `${span.spanId}: no lightning.rollout_id resource attribute (send to $LIGHTNING_URL/v1/traces, or set OTEL_RESOURCE_ATTRIBUTES)`,
        );
        continue;
      }
      const list = byRollout.get(target);
      if (list) list.push(span);
      else byRollout.set(target, [span]);
    }
    let stored = 0;
    let overloaded: OverloadedError | undefined;
    await Promise.all(
      [...byRollout].map(async ([rolloutId, list]) => {
        const admission = admits(rolloutId);
        if (admission && 'refused' in admission) {
          problems.push(`${list.length} span(s): ${admission.refused}`);
          return;
        }
        // What its spans' own headers carried is remembered for the rollout, as scrubSpan does on this thread: the
        // rollout's later records are scrubbed with it, and the export's spans prepared before the one that carried it
        // are refused by the store (503), to be scrubbed with it when the export is retried.
        if (rolloutId === urlRolloutId && part.found.length > 0) rememberRolloutSecrets(rolloutId, part.found);
        try {
          // The key's attempt for the rollout it opens; spans naming another rollout (or sent with the daemon's token)
          // the attempt it ran as they were admitted: if that attempt ends before the write, they are marked late.
          const owned =
            rolloutId === urlRolloutId && attempt !== undefined
              ? { attempt }
              : admission
                ? { attempt: admission.attempt }
                : {};
          stored += (await this.writes.submitSpans(rolloutId, list, { urgent, ...owned })).length;
        } catch (error) {
          // The daemon is busy or the store cannot write (a full disk): a 503 with Retry-After makes the
          // exporter retry the batch later; a partial success it would not retry.
          if (error instanceof OverloadedError) overloaded = error;
          // A batch that can never fit is the exporter's to split: 413, not a partial success.
          if (error instanceof PayloadTooLargeError) throw error;
          problems.push(`${list.length} span(s) for rollout ${rolloutId}: ${errorMessage(error)}`);
        }
      }),
    );
    if (overloaded) throw overloaded;
    return stored;
  }
}
