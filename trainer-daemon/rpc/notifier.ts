/**
 * Turns the store's change events into the protocol's notifications, batched: at most one
 * `rollouts/changed` and one `spans/added` every `intervalMs` (100 ms), carrying the latest state of
 * each changed rollout and, per rollout, the range of spans stored since the last flush.
 */
import type { NotificationName, NotificationParamsOf, SpanRange } from '../protocol';
import type { StoredSpanRef } from '../store/changes';
import type { Store } from '../store/store';
import { DisposableStore, type Disposable } from '../protocol/event';

export type Broadcast = <N extends NotificationName>(name: N, params: NotificationParamsOf<N>) => void;

export class ChangeNotifier implements Disposable {
  private readonly subscriptions = new DisposableStore();
  private changed = new Set<string>();
  /** New spans per rollout since the last flush, as a sequence range. */
  private spans = new Map<string, SpanRange>();
  private timer: NodeJS.Timeout | undefined;
  private lastFlush = -Infinity;

  constructor(
    private readonly store: Store,
    private readonly broadcast: Broadcast,
    private readonly intervalMs = 100,
  ) {
    this.subscriptions.add(store.onDidChangeRollouts((ids) => this.noteRollouts(ids)));
    this.subscriptions.add(store.onDidAddSpans((spans) => this.noteSpans(spans)));
    // Rare (a few per APO round or GRPO iteration): announced at once, with the leaderboard.
    this.subscriptions.add(
      store.onDidChangeTrainingRun(({ id, round }) => {
        broadcast('trainingRunChanged', { ...store.trainingRunChange(id), round });
      }),
    );
  }

  private noteRollouts(ids: readonly string[]): void {
    for (const id of ids) this.changed.add(id);
    this.schedule();
  }

  private noteSpans(spans: readonly StoredSpanRef[]): void {
    for (const span of spans) {
      const range = this.spans.get(span.rolloutId);
      if (!range)
        this.spans.set(span.rolloutId, {
          rolloutId: span.rolloutId,
          fromSequence: span.sequence,
          toSequence: span.sequence,
        });
      else {
        // In place: a large export announces tens of thousands of spans at once.
        range.fromSequence = Math.min(range.fromSequence, span.sequence);
        range.toSequence = Math.max(range.toSequence, span.sequence);
      }
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.timer) return;
    const wait = Math.max(0, this.lastFlush + this.intervalMs - performance.now());
    this.timer = setTimeout(() => this.flush(), wait);
    this.timer.unref();
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.lastFlush = performance.now();
    const ranges = [...this.spans.values()];
    const ids = [...this.changed];
    this.spans = new Map();
    this.changed = new Set();
    if (ranges.length > 0) this.broadcast('spansAdded', { rollouts: ranges });
    if (ids.length > 0 && this.store.isOpen) {
      this.broadcast('rolloutsChanged', { rollouts: ids.map((id) => this.store.getRollout(id)) });
    }
  }

  dispose(): void {
    this.flush();
    this.subscriptions.dispose();
  }
}
