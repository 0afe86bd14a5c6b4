/**
 * What a store write changed, announced after its commit: rollouts (with the spans stored) and training runs.
 * A write outside a transaction announces at once; inside an enclosing (group) transaction the changes wait
 * until it commits (`flush`), and a group's failed operation takes its own back (`mark` / `rollback`).
 */
import { Emitter, type Event } from '../protocol/event';

/** A stored span as a commit announces it: where it landed (what the live views ask for is read from there). */
export interface StoredSpanRef {
  readonly rolloutId: string;
  readonly sequence: number;
}

interface Pending {
  rollouts: string[];
  spans: StoredSpanRef[];
  runs: Array<{ id: string; round: number | null }>;
}

/** How much was pending when a group's operation started (see `rollback`). */
export type PendingMark = Readonly<Record<keyof Pending, number>>;

export class StoreChanges {
  private readonly _onDidChangeTrainingRun = new Emitter<{ id: string; round: number | null }>();
  private readonly _onDidChangeRollouts = new Emitter<readonly string[]>();
  private readonly _onDidAddSpans = new Emitter<readonly StoredSpanRef[]>();
  private pending: Pending | undefined;

  /** Ids of rollouts created or changed by a committed write. */
  readonly onDidChangeRollouts: Event<readonly string[]> = this._onDidChangeRollouts.event;
  /** Spans stored by a committed write, in sequence order per rollout. */
  readonly onDidAddSpans: Event<readonly StoredSpanRef[]> = this._onDidAddSpans.event;
  /** A training run's status, cancel request, metrics, checkpoints or (APO) round changed, after the commit. */
  readonly onDidChangeTrainingRun: Event<{ id: string; round: number | null }> = this._onDidChangeTrainingRun.event;

  /** Rollouts (and spans) changed: announced now, or kept for `flush` while `inTransaction`. */
  rollouts(rolloutIds: readonly string[], spans: readonly StoredSpanRef[], inTransaction: boolean): void {
    if (inTransaction) {
      const pending = (this.pending ??= { rollouts: [], spans: [], runs: [] });
      // One by one: spreading a batch of 200,000 spans into push() overflows the call stack.
      for (const id of rolloutIds) pending.rollouts.push(id);
      for (const span of spans) pending.spans.push(span);
      return;
    }
    if (spans.length > 0) this._onDidAddSpans.fire(spans);
    this._onDidChangeRollouts.fire(rolloutIds);
  }

  /** A training run changed: announced now, or kept for `flush` while `inTransaction`. */
  run(id: string, round: number | null, inTransaction: boolean): void {
    if (inTransaction) {
      (this.pending ??= { rollouts: [], spans: [], runs: [] }).runs.push({ id, round });
      return;
    }
    this._onDidChangeTrainingRun.fire({ id, round });
  }

  mark(): PendingMark {
    return {
      rollouts: this.pending?.rollouts.length ?? 0,
      spans: this.pending?.spans.length ?? 0,
      runs: this.pending?.runs.length ?? 0,
    };
  }

  /** Takes back what was kept since `mark` (a group's operation that failed). */
  rollback(mark: PendingMark): void {
    this.pending?.rollouts.splice(mark.rollouts);
    this.pending?.spans.splice(mark.spans);
    this.pending?.runs.splice(mark.runs);
  }

  /** The enclosing transaction failed: nothing kept is announced. */
  discard(): void {
    this.pending = undefined;
  }

  /** The enclosing transaction committed: announces what was kept (each rollout once). */
  flush(): void {
    const pending = this.pending;
    this.pending = undefined;
    if (pending && pending.rollouts.length > 0) this.rollouts([...new Set(pending.rollouts)], pending.spans, false);
    for (const run of pending?.runs ?? []) this.run(run.id, run.round, false);
  }

  dispose(): void {
    this._onDidChangeRollouts.dispose();
    this._onDidAddSpans.dispose();
    this._onDidChangeTrainingRun.dispose();
  }
}
