/**
 * Turns the store's change events into the protocol's notifications, batched: at most one
 * `rollouts/changed` and one `spans/added` every `intervalMs` (100 ms), carrying the latest state of
 * each changed rollout and every span stored since the last flush.
 */
import type { NotificationName, NotificationParamsOf, Span } from '../protocol';
import type { Store } from '../store/store';
import { DisposableStore, type Disposable } from '../util/event';

export type Broadcast = <N extends NotificationName>(name: N, params: NotificationParamsOf<N>) => void;

export class ChangeNotifier implements Disposable {
  private readonly subscriptions = new DisposableStore();
  private changed = new Set<string>();
  private spans: Span[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastFlush = -Infinity;

  constructor(
    private readonly store: Store,
    private readonly broadcast: Broadcast,
    private readonly intervalMs = 100,
  ) {
    this.subscriptions.add(store.onDidChangeRollouts((ids) => this.noteRollouts(ids)));
    this.subscriptions.add(store.onDidAddSpans((spans) => this.noteSpans(spans)));
  }

  private noteRollouts(ids: readonly string[]): void {
    for (const id of ids) this.changed.add(id);
    this.schedule();
  }

  private noteSpans(spans: readonly Span[]): void {
    this.spans.push(...spans);
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
    const spans = this.spans;
    const ids = [...this.changed];
    this.spans = [];
    this.changed = new Set();
    if (spans.length > 0) this.broadcast('spansAdded', { spans });
    if (ids.length > 0 && this.store.isOpen) {
      this.broadcast('rolloutsChanged', { rollouts: ids.map((id) => this.store.getRollout(id)) });
    }
  }

  dispose(): void {
    this.flush();
    this.subscriptions.dispose();
  }
}
