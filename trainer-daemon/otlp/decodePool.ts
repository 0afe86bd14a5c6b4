/**
 * Runs OTLP decoding in worker threads when the bundled worker is there (the daemon), inline
 * otherwise (tests importing the sources). Errors keep their kind across the thread boundary, so
 * HTTP statuses stay the same either way.
 *
 * Fairness: exports wait in one queue per source (a rollout, or the shared endpoint), and a free
 * worker takes the next export of the source that has waited longest, never a second one of a source
 * it is already decoding while others wait. One rollout's heavy export (a 128 MiB body decodes for
 * seconds) thus holds at most one worker, and the other rollouts' exports go on in the others.
 * When no other source waits, a source's small exports (SHARED_DECODE_MAX_BYTES) decode side by side on
 * the idle workers; a source that comes then waits for one small export, never a large one. Decoded one
 * at a time, a busy rollout's next export could only start once the main thread, committing the one
 * before, had taken its answer: every commit carried one export (measured: 358 of the 359 span commits of
 * a 4-exporter ingest held 512 spans), and each commit costs by the pages it touches.
 * A decoded export comes back part by part (parts.ts), each asked for once the one before is done.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { assertNever } from '../protocol/assert';
import { InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../protocol/errors';
import type { Logger } from '../log';
import type { NormalizedSpan, RejectedSpan } from './normalize';
import { splitIntoParts } from './parts';
import { ExportPreparer, unpackPart, type ExportSecrets, type PreparedPart } from './prepare';
import { ExportCancelledError } from './gunzip';
import type { DecodeLimits, DecodeReply, DecodeRequest } from './decodeWorker';

const ERRORS: Record<string, new (message: string) => Error> = {
  InvalidInputError,
  UnsupportedMediaTypeError,
  PayloadTooLargeError,
  ExportCancelledError,
};

/** At least two, so one busy source always leaves a worker for the rest; at most four (each holds OTLP's decoder). */
export const DEFAULT_DECODE_WORKERS = Math.min(4, Math.max(2, os.availableParallelism() - 1));

/**
 * Each decode worker's JavaScript heap (V8's old generation), in MiB: what one export may take to decode, so the
 * workers together hold at most their count times this, whatever they are sent. Decoded spans take about twice
 * the body's bytes, and JSON.parse holds the text too: an export is refused (413) before it is decoded when
 * DECODE_MEMORY_FACTOR times its size is over the heap — a 128 MiB body (the cap) fits 1 GiB — because V8 stopping a
 * worker at its limit is best effort: one large allocation past it aborts the whole process instead
 * (nodejs/node#47224). The worker's limit stays as the backstop (an export that needs more: 413, worker replaced).
 */
export const DEFAULT_DECODE_WORKER_HEAP_MB = 1024;
export const DECODE_MEMORY_FACTOR = 6;

function tooLargeToDecode(heapMb: number, bytes?: number): PayloadTooLargeError {
  return new PayloadTooLargeError(
    `decoding this OTLP export${bytes === undefined ? '' : ` (${bytes} bytes)`} needs more than the decoder's ${heapMb} MiB (LIGHTNING_OTLP_WORKER_HEAP_MB); export smaller batches`,
  );
}

/**
 * An export this small (its body's bytes) decodes in a few milliseconds: a source may decode several such at once,
 * each on a worker nobody else waits for, so a busy rollout's exports are decoded while the main thread commits.
 * Where the pool has room it starts a worker for one (the export then waits for that worker's decoder to load, once:
 * workers stay for the daemon's life, up to the pool's size, as when several rollouts export at once).
 */
export const SHARED_DECODE_MAX_BYTES = 1024 * 1024;

/** One decoded export, read part by part; `close` (always call it) gives its worker back. */
export interface DecodedExport {
  /** The next part's spans, prepared for the store, or null once all were read; rejects if it cannot be decoded. */
  next(): Promise<PreparedPart | null>;
  /** The spans that could not be read; complete once `next` returned null. */
  readonly rejected: RejectedSpan[];
  close(): void;
}

interface Job {
  readonly request: Omit<Extract<DecodeRequest, { kind: 'decode' }>, 'scrub'>;
  readonly scrub: () => ExportSecrets;
  /**
   * Its body is at most SHARED_DECODE_MAX_BYTES: known when it came, since the body's buffers are moved to the worker
   * (and read as empty here) once it is dispatched.
   */
  readonly small: boolean;
  readonly source: string;
  readonly rejected: RejectedSpan[];
  /** Replies not yet read, and the read waiting for one. */
  readonly replies: DecodeReply[];
  reader: ((reply: DecodeReply) => void) | undefined;
  slot: Slot | undefined;
  /** Its worker answered once: it is handing out parts, no longer decoding. */
  answered: boolean;
  finished: boolean;
}

interface Slot {
  readonly worker: Worker;
  /** The export it decodes or hands out now; undefined while idle. */
  job: Job | undefined;
}

export interface DecodePoolOptions {
  readonly logger: Logger;
  /** The bundled worker script (default: dist/otlp-worker.js beside this bundle); absent, exports decode inline. */
  readonly workerFile?: string;
  /** Workers at most (default DEFAULT_DECODE_WORKERS). */
  readonly size?: number;
  /** Each worker's JavaScript heap, in MiB (default DEFAULT_DECODE_WORKER_HEAP_MB; the daemon's: limits.ts). */
  readonly heapMb?: number;
}

export class DecodePool {
  private readonly logger: Logger;
  private readonly workerFile: string;
  private readonly size: number;
  private readonly heapMb: number;
  private readonly slots: Slot[] = [];
  private nextId = 0;
  /** Exports not yet handed to a worker, by source; a Map keeps the sources in the order they are served. */
  private readonly queues = new Map<string, Job[]>();
  private closed = false;

  /** Whether the bundled worker is there (the daemon); else exports decode inline. */
  private readonly bundled: boolean;

  constructor(options: DecodePoolOptions) {
    this.logger = options.logger;
    this.workerFile = options.workerFile ?? path.join(__dirname, 'otlp-worker.js');
    this.size = options.size ?? DEFAULT_DECODE_WORKERS;
    this.heapMb = options.heapMb ?? DEFAULT_DECODE_WORKER_HEAP_MB;
    this.bundled = fs.existsSync(this.workerFile);
    // One worker loads OTLP's decoder now, so the first export after a start does not wait seconds for it.
    if (this.bundled) this.startWorker();
  }

  /**
   * Decodes one export of `source` (the rollout it was sent for, or a name for the shared endpoint);
   * exports of one source start decoding in the order they came (small ones may decode side by side, and are
   * stored in the order they finish, as exports sent at once may be).
   */
  decode(
    source: string,
    body: readonly Buffer[],
    contentType: string | undefined,
    contentEncoding: string | undefined,
    limits: DecodeLimits,
    /** What its spans are scrubbed with (prepare.ts): asked when its decoding starts, the latest then. */
    scrub: () => ExportSecrets,
  ): DecodedExport {
    if (this.closed) throw new Error('the OTLP decoder has shut down');
    const bytes = body.reduce((sum, chunk) => sum + chunk.byteLength, 0);
    if (bytes * DECODE_MEMORY_FACTOR > this.heapMb * 1024 * 1024) throw tooLargeToDecode(this.heapMb, bytes);
    if (!this.bundled)
      return decodeInline(
        body.length === 1 ? body[0]! : Buffer.concat(body),
        contentType,
        contentEncoding,
        limits,
        scrub,
      );
    const job: Job = {
      small: bytes <= SHARED_DECODE_MAX_BYTES,
      request: { kind: 'decode', id: (this.nextId += 1), body, contentType, contentEncoding, limits },
      scrub,
      source,
      rejected: [],
      replies: [],
      reader: undefined,
      slot: undefined,
      answered: false,
      finished: false,
    };
    const queue = this.queues.get(source);
    if (queue) queue.push(job);
    else this.queues.set(source, [job]);
    this.dispatch();
    return {
      next: () => this.read(job),
      rejected: job.rejected,
      close: () => this.release(job),
    };
  }

  /** The next reply of a job as a part (null when done), asking its worker for the part after it. */
  private async read(job: Job): Promise<PreparedPart | null> {
    if (job.finished) return null;
    const reply = job.replies.shift() ?? (await new Promise<DecodeReply>((resolve) => (job.reader = resolve)));
    switch (reply.kind) {
      case 'part':
        job.slot?.worker.postMessage({ kind: 'next', id: job.request.id } satisfies DecodeRequest);
        return unpackPart(reply.part);
      case 'last':
        for (const rejected of reply.rejected) job.rejected.push(rejected);
        this.finish(job);
        return unpackPart(reply.part);
      case 'done':
        for (const rejected of reply.rejected) job.rejected.push(rejected);
        this.finish(job);
        return null;
      case 'failed':
        this.finish(job);
        throw new (ERRORS[reply.error.name] ?? Error)(reply.error.message);
      default:
        return assertNever(reply);
    }
  }

  private deliver(job: Job, reply: DecodeReply): void {
    const reader = job.reader;
    job.reader = undefined;
    if (reader) reader(reply);
    else job.replies.push(reply);
  }

  /** The job's worker is free again (or the job never got one): the next export may have it. */
  private finish(job: Job): void {
    if (job.finished) return;
    job.finished = true;
    const slot = job.slot;
    job.slot = undefined;
    if (slot?.job === job) slot.job = undefined;
    const queue = this.queues.get(job.source);
    if (queue?.includes(job)) {
      queue.splice(queue.indexOf(job), 1);
      if (queue.length === 0) this.queues.delete(job.source);
    }
    if (!this.closed) this.dispatch();
  }

  /** The caller is done with the export: the rest of it is dropped and its worker freed once it says so. */
  private release(job: Job): void {
    if (job.finished) return;
    const cancelled: DecodeReply = {
      kind: 'failed',
      id: job.request.id,
      error: { name: 'ExportCancelledError', message: 'the export was dropped before it was decoded' },
    };
    if (!job.slot) {
      this.deliver(job, cancelled);
      return this.finish(job);
    }
    if (!job.answered) {
      // Still decoding (a big export takes seconds): that work is for nobody now, so its worker ends and
      // a fresh one takes its place for the next export.
      const slot = job.slot;
      this.slots.splice(this.slots.indexOf(slot), 1);
      slot.job = undefined;
      void slot.worker.terminate();
      this.logger.debug('an OTLP export was dropped while decoding; its worker was stopped', { source: job.source });
      this.deliver(job, cancelled);
      return this.finish(job);
    }
    job.slot.worker.postMessage({ kind: 'drop', id: job.request.id } satisfies DecodeRequest);
    // What the worker had sent already, then its `done` for the drop (or the `last` part it had sent), ends the job.
    const drain = (): void =>
      void this.read(job).then(
        (part) => part && drain(),
        () => undefined,
      );
    drain();
  }

  /** Hands waiting exports to idle workers, starting workers up to the pool's size as they are needed. */
  private dispatch(): void {
    for (;;) {
      const source = this.nextSource();
      if (source === undefined) return;
      const slot =
        this.slots.find((s) => s.job === undefined) ?? (this.slots.length < this.size ? this.startWorker() : undefined);
      if (!slot) {
        this.logger.debug('an OTLP export waits for a decode worker', { source, workers: this.slots.length });
        return;
      }
      const queue = this.queues.get(source)!;
      const job = queue.shift()!;
      // Served: the source goes to the back of the line with whatever it still has waiting.
      this.queues.delete(source);
      if (queue.length > 0) this.queues.set(source, queue);
      slot.job = job;
      job.slot = slot;
      const bytes = job.request.body.reduce((sum, chunk) => sum + chunk.byteLength, 0);
      this.logger.debug('decoding an OTLP export', { source, bytes });
      // The secrets as they are now, not when the export came: it may have waited behind its rollout's others.
      const request: DecodeRequest = { ...job.request, scrub: job.scrub() };
      slot.worker.postMessage(request, transferable(job.request.body));
    }
  }

  /**
   * The longest-waiting source that no worker is decoding for now; else, when every waiting source has a worker
   * already, the longest-waiting one whose next export is small and whose workers decode only small ones.
   */
  private nextSource(): string | undefined {
    let shared: string | undefined;
    for (const [source, queue] of this.queues) {
      const decoding = this.slots.filter((slot) => slot.job?.source === source);
      if (decoding.length === 0) return source;
      if (shared === undefined && queue[0]!.small && decoding.every((slot) => slot.job!.small)) shared = source;
    }
    return shared;
  }

  private startWorker(): Slot {
    const worker = new Worker(this.workerFile, {
      resourceLimits: { maxOldGenerationSizeMb: this.heapMb, maxYoungGenerationSizeMb: 32 },
    });
    const slot: Slot = { worker, job: undefined };
    slot.worker.unref();
    slot.worker.on('message', (reply: DecodeReply) => {
      const job = slot.job;
      if (job?.request.id !== reply.id) return;
      job.answered = true;
      this.deliver(job, reply);
      if (reply.kind === 'part') return;
      // The worker holds nothing more of this export (its last part, if any, is with the reader): it may take the
      // next export now, while that part is committed.
      slot.job = undefined;
      job.slot = undefined;
      if (!this.closed) this.dispatch();
    });
    slot.worker.on('error', (error: Error & { code?: string }) => {
      // A crashed worker (out of memory on a hostile export): that export fails, a new worker takes its place.
      this.logger.warn('an OTLP decode worker failed; its export is refused', { error });
      this.slots.splice(this.slots.indexOf(slot), 1);
      const job = slot.job;
      slot.job = undefined;
      if (!job) return;
      this.deliver(job, {
        kind: 'failed',
        id: job.request.id,
        error:
          error.code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? { name: 'PayloadTooLargeError', message: tooLargeToDecode(this.heapMb).message }
            : { name: 'Error', message: `the OTLP decoder failed on this export (${error.message})` },
      });
      if (!this.closed) this.dispatch();
    });
    this.slots.push(slot);
    return slot;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of [...this.queues.values()].flat())
      this.deliver(job, {
        kind: 'failed',
        id: job.request.id,
        error: { name: 'Error', message: 'the OTLP decoder has shut down' },
      });
    this.queues.clear();
    await Promise.all(this.slots.map((slot) => slot.worker.terminate()));
    this.slots.length = 0;
  }
}

/**
 * The memory of the chunks that can move to the worker instead of being copied: each ArrayBuffer the chunks
 * cover whole (a small Buffer shares Node's pool with other Buffers, and is copied).
 */
function transferable(chunks: readonly Uint8Array[]): ArrayBuffer[] {
  const covered = new Map<ArrayBuffer, number>();
  for (const chunk of chunks)
    if (chunk.buffer instanceof ArrayBuffer)
      covered.set(chunk.buffer, (covered.get(chunk.buffer) ?? 0) + chunk.byteLength);
  return [...covered].filter(([buffer, bytes]) => bytes === buffer.byteLength).map(([buffer]) => buffer);
}

/** Decoding on the calling thread (the sources without the bundled worker): the same parts and errors. */
function decodeInline(
  body: Buffer,
  contentType: string | undefined,
  contentEncoding: string | undefined,
  limits: DecodeLimits,
  scrub: () => ExportSecrets,
): DecodedExport {
  // Loaded on first use only: the daemon decodes in its workers, and its main thread need not load the decoder.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { asInputError, decodeTraceRequest } = require('./decode') as typeof import('./decode');
  const { normalizeTraceRequest } = require('./normalize') as typeof import('./normalize');
  /* eslint-enable @typescript-eslint/no-require-imports */
  let decoded: { parts: NormalizedSpan[][]; rejected: RejectedSpan[] } | undefined;
  let preparer: ExportPreparer | undefined;
  const rejected: RejectedSpan[] = [];
  return {
    next: async () => {
      if (!decoded) {
        try {
          const { spans, rejected: unread } = normalizeTraceRequest(
            decodeTraceRequest(body, contentType, contentEncoding, limits.maxBytes, limits.maxSpans),
          );
          decoded = { parts: splitIntoParts(spans), rejected: unread };
        } catch (error) {
          throw asInputError(error);
        }
      }
      const part = decoded.parts.shift();
      preparer ??= new ExportPreparer(scrub());
      if (part) return preparer.part(part);
      for (const unread of decoded.rejected) rejected.push(unread);
      return null;
    },
    rejected,
    close: () => undefined,
  };
}
