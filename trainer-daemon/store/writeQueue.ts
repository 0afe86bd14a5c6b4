/**
 * Group commit for the daemon's writes. Callers (RPC handlers, and later the proxy, the OTLP
 * receiver and the dataset runner) submit store operations and get a promise that settles once the
 * operation is committed; everything submitted during one turn of the event loop runs in a single
 * transaction, each operation in its own savepoint (a group of one needs none). Many concurrent
 * rollouts thus cost one commit per turn instead of one each, and an acknowledged write is always a
 * durable one.
 *
 * The queue is bounded (in units: one per operation, or the number of spans it carries): past
 * `maxQueued` a submission is refused at once, so the caller can answer "busy" instead of the
 * daemon's memory growing without limit.
 */
import type { SpanInput } from '../protocol';
import { isPrepared, type PreparedSpan } from '../protocol/preparedSpan';
import { errorMessage, OverloadedError, PayloadTooLargeError, StorageUnavailableError } from '../protocol/errors';
import type { Logger } from '../log';
import type { SpanBatchOutcome, StoredSpanResult } from './spans';
import type { Store } from './store';

export { OverloadedError };

/** SQLite's result codes (either driver's code or message) for "the store cannot write now". */
const STORAGE_FAILURE =
  /SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY)|database or disk is full|disk I\/O error|database is locked|attempt to write a readonly database/i;

/**
 * A storage-level failure as a StorageUnavailableError (retryable: 503, -32003), with what to do;
 * any other error unchanged.
 */
export function asStorageError(error: unknown): unknown {
  if (error instanceof StorageUnavailableError) return error;
  const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code : '';
  const text = `${code} ${errorMessage(error)}`;
  if (!STORAGE_FAILURE.test(text)) return error;
  const why = /FULL|full/.test(text)
    ? 'the disk is full'
    : /BUSY|LOCKED|locked/.test(text)
      ? 'another process holds the store’s write lock'
      : 'the store could not be written';
  return new StorageUnavailableError(
    `the write was not made: ${why} (${errorMessage(error)}); free space or release the store, then retry`,
    { cause: error },
  );
}

/** Past this many queued spans a commit is worth making at once: the span window is for small writes. */
const SPAN_WINDOW_UNITS = 256;

interface Pending {
  readonly op: () => unknown;
  readonly units: number;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

interface PendingSpans {
  readonly spans: ReadonlyArray<SpanInput | PreparedSpan>;
  resolve(results: StoredSpanResult[]): void;
  reject(error: unknown): void;
}

export interface WriteQueueOptions {
  /** Commit early once this many units are queued. */
  readonly maxBatchUnits?: number;
  /** Refuse new work while this many units are waiting. */
  readonly maxQueued?: number;
  /**
   * How long span writes may wait for company when nothing else is queued (default 10 ms). Under
   * proxy load this turns a commit per LLM call into a commit per window; any other write flushes
   * the spans with it at once. Spans are still acknowledged only once committed.
   */
  readonly spanDelayMs?: number;
  /**
   * How long a group commit that another process's write lock keeps out is retried (default 5 s),
   * with backoff and the event loop free in between; then its writes fail with a retryable
   * StorageUnavailableError (503, -32003).
   */
  readonly lockWaitMs?: number;
}

/** SQLITE_BUSY: another connection holds the write lock (not SQLITE_LOCKED, a conflict within one connection). */
const LOCKED_OUT = /SQLITE_BUSY\b|database is locked/i;
/** The first retry of a locked-out group commit, doubled each time up to the last. */
const LOCK_RETRY_FIRST_MS = 25;
const LOCK_RETRY_MAX_MS = 500;

export class WriteQueue {
  private queue: Pending[] = [];
  /**
   * Span writes waiting, merged into one batch per key per commit (the ingest hot path): by rollout and the attempt
   * their key named (none: the rollout's current one); an OTLP worker's prepared spans one batch per write. A rollout's
   * exports with and without a key in one window are stored batch by batch, not interleaved by arrival.
   */
  private spans = new Map<string, { rolloutId: string; attempt?: number; waiting: PendingSpans[] }>();
  private queuedUnits = 0;
  /** Numbers prepared span writes, each a batch of its own. */
  private preparedWrites = 0;
  private scheduled: NodeJS.Immediate | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly maxBatchUnits: number;
  private readonly maxQueued: number;
  private readonly spanDelayMs: number;
  private readonly lockWaitMs: number;
  /** Since when group commits are locked out by another process, and how many retries were made. */
  private lockedOut: { since: number; retries: number } | undefined;

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    options: WriteQueueOptions = {},
  ) {
    this.maxBatchUnits = options.maxBatchUnits ?? 20_000;
    this.maxQueued = options.maxQueued ?? 200_000;
    this.spanDelayMs = options.spanDelayMs ?? 10;
    this.lockWaitMs = options.lockWaitMs ?? 5_000;
  }

  /** The most spans one write may carry: more is a 413, since the queue could never hold them. */
  get maxSpansPerWrite(): number {
    return this.maxQueued;
  }

  /** Runs `op` (a synchronous Store call) in the next group commit; resolves with its result after the commit. */
  submit<T>(op: () => T, units = 1): Promise<T> {
    const refusal = this.refusal(units);
    if (refusal) return Promise.reject(refusal);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ op, units, resolve: resolve, reject });
      this.enqueued(units);
    });
  }

  /**
   * Stores spans in the next group commit. Concurrent writes for one rollout are merged into a
   * single batch (one counter update per rollout per commit); each caller gets its own results.
   */
  submitSpans(
    rolloutId: string,
    spans: ReadonlyArray<SpanInput | PreparedSpan>,
    /** `attempt`: the one whose key the spans came with (store/spans.ts SpanBatch.attempt). */
    options: { urgent?: boolean; attempt?: number } = {},
  ): Promise<StoredSpanResult[]> {
    const refusal = this.refusal(spans.length);
    if (refusal) return Promise.reject(refusal);
    return new Promise((resolve, reject) => {
      // Each export's part an OTLP worker prepared in a batch of its own: the store refuses such a batch whole when the
      // worker's scrub lacked a secret (store/spans.ts), which must not take other exports' spans, or spans/add's, with
      // it.
      const prepared = spans.length > 0 && isPrepared(spans[0]!);
      const key = prepared
        ? `prepared\u0000${(this.preparedWrites += 1)}`
        : `${rolloutId}\u0000${options.attempt ?? ''}`;
      const group = this.spans.get(key);
      if (group) group.waiting.push({ spans, resolve, reject });
      else this.spans.set(key, { rolloutId, attempt: options.attempt, waiting: [{ spans, resolve, reject }] });
      // Urgent spans (a proxied call whose answer waits on its commit) skip the span window.
      this.enqueued(spans.length, options.urgent !== true);
    });
  }

  private refusal(units: number): Error | undefined {
    if (this.stopped) return new OverloadedError('the daemon is shutting down; the write was not made');
    // More than the queue can ever hold: retrying cannot help (413, not 503).
    if (units > this.maxQueued)
      return new PayloadTooLargeError(
        `${units} spans in one write is over the ${this.maxQueued} limit; send them in smaller batches`,
      );
    if (this.queuedUnits + units > this.maxQueued) {
      return new OverloadedError(`the write queue is full (${this.queuedUnits} waiting); retry shortly`);
    }
    return undefined;
  }

  /** Schedules the commit: on the next turn, or for span-only queues after the span window. */
  private enqueued(units: number, lazy = false): void {
    this.queuedUnits += units;
    // Locked out: the retry already scheduled commits this too.
    if (this.lockedOut) return;
    if (this.queuedUnits >= this.maxBatchUnits) this.flush();
    else if (!lazy || this.queue.length > 0 || this.queuedUnits >= SPAN_WINDOW_UNITS)
      this.scheduled ??= setImmediate(() => this.flush());
    else if (!this.scheduled && !this.timer) this.timer = setTimeout(() => this.flush(), this.spanDelayMs);
  }

  /** One operation that stores every queued span write, merged per rollout, and hands out the results. */
  private takeSpanWrites(): Pending | undefined {
    if (this.spans.size === 0) return undefined;
    const groups = [...this.spans.values()];
    this.spans = new Map();
    const settle = (outcomes: Array<SpanBatchOutcome | Error>): void => {
      outcomes.forEach((outcome, index) => {
        let offset = 0;
        for (const waiting of groups[index]!.waiting) {
          if (outcome instanceof Error) waiting.reject(outcome);
          else waiting.resolve(outcome.results.slice(offset, offset + waiting.spans.length));
          offset += waiting.spans.length;
        }
      });
    };
    return {
      op: () =>
        this.store.addSpanBatches(
          groups.map(({ rolloutId, attempt, waiting }) => ({
            rolloutId,
            spans: waiting.flatMap((w) => w.spans),
            ...(attempt === undefined ? {} : { attempt }),
          })),
        ),
      units: 0,
      resolve: (outcomes) => settle(outcomes as Array<SpanBatchOutcome | Error>),
      reject: (error) => {
        for (const waiting of groups.flatMap((group) => group.waiting)) waiting.reject(error);
      },
    };
  }

  /** Commits everything queued now. */
  flush(): void {
    if (this.scheduled) clearImmediate(this.scheduled);
    if (this.timer) clearTimeout(this.timer);
    this.scheduled = undefined;
    this.timer = undefined;
    const spanWrites = this.takeSpanWrites();
    const batch = spanWrites ? [...this.queue, spanWrites] : this.queue;
    if (batch.length === 0) return;
    const units = this.queuedUnits;
    this.queue = [];
    this.queuedUnits = 0;
    let outcomes;
    try {
      outcomes = this.store.runGrouped(batch.map((pending) => pending.op));
    } catch (error) {
      if (this.retryWhenLockedOut(batch, units, error)) return;
      this.logger.error('group commit failed; none of its writes were made', { error, operations: batch.length });
      for (const pending of batch) pending.reject(asStorageError(error));
      return;
    }
    this.lockedOut = undefined;
    outcomes.forEach((outcome, index) => {
      const pending = batch[index]!;
      if (outcome.ok) pending.resolve(outcome.value);
      else pending.reject(asStorageError(outcome.error));
    });
  }

  /**
   * A group commit kept out by another process's write lock (SQLITE_BUSY after the store's short
   * busy timeout) goes back to the head of the queue and is retried with backoff, the event loop
   * serving other requests in between; false once it has waited `lockWaitMs` (or the queue stops).
   */
  private retryWhenLockedOut(batch: Pending[], units: number, error: unknown): boolean {
    const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code : '';
    if (this.stopped || !LOCKED_OUT.test(`${code} ${errorMessage(error)}`)) return false;
    const now = Date.now();
    this.lockedOut ??= { since: now, retries: 0 };
    if (now - this.lockedOut.since >= this.lockWaitMs) {
      this.lockedOut = undefined;
      return false;
    }
    if (this.lockedOut.retries === 0)
      this.logger.warn('another process holds the store’s write lock; writes wait for it', {
        operations: batch.length,
      });
    this.queue = [...batch, ...this.queue];
    this.queuedUnits += units;
    const delay = Math.min(LOCK_RETRY_MAX_MS, LOCK_RETRY_FIRST_MS * 2 ** this.lockedOut.retries);
    this.lockedOut.retries += 1;
    this.timer = setTimeout(() => this.flush(), delay);
    return true;
  }

  /** Stops taking work and commits what is queued. */
  shutdown(): void {
    this.stopped = true;
    this.flush();
  }
}
