/**
 * Seeded randomness (mulberry32): reproducible task subsets, demo tasks and demonstrations, and APO's choices (which
 * tasks go in a batch, how ties among rollouts break), so that a run is repeatable for a seed. Not for anything secret.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A shuffled copy (Fisher–Yates) under `seed`. */
export function shuffled<T>(items: readonly T[], seed: number): T[] {
  return shuffledWith(items, seededRandom(seed));
}

/** A shuffled copy (Fisher–Yates) drawing from `random` (a generator whose state carries across calls). */
export function shuffledWith<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i -= 1) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** A seeded generator with the choices APO makes: a run is repeatable for its seed. */
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
