/**
 * Batched span ingest. Callers (the RPC, and later the proxy and the OTLP receiver) enqueue spans
 * and get a promise that settles once their spans are committed; everything queued during one turn
 * of the event loop is written in a single transaction. The queue is bounded: past `maxQueuedSpans`
 * a write is refused at once (the caller answers "busy") rather than growing memory without limit.
 */
import type { SpanResult } from '../protocol';
import { LightningError } from '../errors';
import type { Logger } from '../log';
import type { Store } from './store';

export class OverloadedError extends LightningError {}

interface Pending {
  readonly rolloutId: string;
  readonly spans: readonly unknown[];
  resolve(results: SpanResult[]): void;
  reject(error: Error): void;
}

export interface SpanWriterOptions {
  /** Flush early once this many spans are queued. */
  readonly maxBatchSpans?: number;
  /** Refuse new spans while this many are waiting. */
  readonly maxQueuedSpans?: number;
}

export class SpanWriter {
  private queue: Pending[] = [];
  private queuedSpans = 0;
  private scheduled: NodeJS.Immediate | undefined;
  private stopped = false;
  private readonly maxBatchSpans: number;
  private readonly maxQueuedSpans: number;

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    options: SpanWriterOptions = {},
  ) {
    this.maxBatchSpans = options.maxBatchSpans ?? 5_000;
    this.maxQueuedSpans = options.maxQueuedSpans ?? 200_000;
  }

  write(rolloutId: string, spans: readonly unknown[]): Promise<SpanResult[]> {
    if (this.stopped) return Promise.reject(new OverloadedError('the daemon is shutting down; spans were not stored'));
    if (this.queuedSpans + spans.length > this.maxQueuedSpans) {
      return Promise.reject(new OverloadedError(`span queue is full (${this.queuedSpans} waiting); retry shortly`));
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ rolloutId, spans, resolve, reject });
      this.queuedSpans += spans.length;
      if (this.queuedSpans >= this.maxBatchSpans) this.flush();
      else this.scheduled ??= setImmediate(() => this.flush());
    });
  }

  /** Commits everything queued now. */
  flush(): void {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = undefined;
    const batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    this.queuedSpans = 0;
    let outcomes;
    try {
      outcomes = this.store.addSpanBatches(batch);
    } catch (error) {
      this.logger.error('span batch failed; nothing from it was stored', { error, batches: batch.length });
      for (const pending of batch) pending.reject(error as Error);
      return;
    }
    outcomes.forEach((outcome, index) => {
      const pending = batch[index]!;
      if (outcome instanceof Error) pending.reject(outcome);
      else pending.resolve(outcome.results);
    });
  }

  /** Stops taking spans and commits what is queued. */
  shutdown(): void {
    this.stopped = true;
    this.flush();
  }
}
