/**
 * A seeded pseudo-random generator (mulberry32) for APO's choices — which tasks go in a batch, how
 * ties among rollouts break — so that a run is repeatable for a seed. Not for anything secret.
 */
import { seededRandom, shuffledWith } from '../util/random';

export class SeededRandom {
  /** A float in [0, 1). */
  readonly next: () => number;

  constructor(seed: number) {
    this.next = seededRandom(seed);
  }

  /** A shuffled copy (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    return shuffledWith(items, this.next);
  }

  /** `count` distinct items (all of them, shuffled, when there are fewer). */
  sample<T>(items: readonly T[], count: number): T[] {
    return this.shuffle(items).slice(0, count);
  }
}
