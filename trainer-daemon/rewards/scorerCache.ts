/**
 * Prepared scorers (function workers, loaded ONNX sessions) kept by spec while in use and for a
 * while after, so that many small scoring calls — one per finished rollout from the dataset runner —
 * share them. A spec is known by its content and folder: an edited rewards file gets a new scorer.
 */
import type { Disposable } from '../protocol/event';
import type { ResolvedSpec } from './config';
import { RewardScorer } from './scorer';

interface Entry {
  readonly scorer: Promise<RewardScorer>;
  users: number;
  timer: NodeJS.Timeout | undefined;
}

export class ScorerCache implements Disposable {
  private readonly entries = new Map<string, Entry>();
  private disposed = false;

  /** @param idleMs how long an unused scorer is kept (0: retired as soon as its last user is done). */
  constructor(private readonly idleMs = 60_000) {}

  async use<T>(resolved: ResolvedSpec, fn: (scorer: RewardScorer) => Promise<T>): Promise<T> {
    const key = JSON.stringify([resolved.baseDir, resolved.spec]);
    let entry = this.entries.get(key);
    if (!entry) {
      entry = { scorer: RewardScorer.prepare(resolved), users: 0, timer: undefined };
      this.entries.set(key, entry);
      // A spec that cannot be prepared (a missing model) is not kept.
      entry.scorer.catch(() => this.entries.delete(key));
    }
    clearTimeout(entry.timer);
    entry.users += 1;
    try {
      return await fn(await entry.scorer);
    } finally {
      entry.users -= 1;
      if (entry.users === 0) this.retireLater(key, entry);
    }
  }

  private retireLater(key: string, entry: Entry): void {
    const retire = (): void => {
      if (entry.users > 0 || this.entries.get(key) !== entry) return;
      this.entries.delete(key);
      void entry.scorer.then(
        (scorer) => scorer.dispose(),
        () => undefined,
      );
    };
    if (this.idleMs === 0 || this.disposed) return retire();
    entry.timer = setTimeout(retire, this.idleMs);
    entry.timer.unref();
  }

  /** Retires idle scorers now, and busy ones when their users are done. */
  dispose(): void {
    this.disposed = true;
    for (const [key, entry] of [...this.entries]) {
      clearTimeout(entry.timer);
      if (entry.users === 0) this.retireLater(key, entry);
    }
  }
}
