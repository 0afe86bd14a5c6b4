/**
 * Compare two rollouts, pure: each rollout's steps (its LLM calls in time order, or every span when
 * it has none), the two step lists aligned (a global alignment that pairs similar steps and leaves
 * a gap where one rollout has a step the other has not), and a word diff of two texts (a prompt,
 * an answer). No DOM: unit tested and benchmarked in Node (two 200-step rollouts).
 */
import type { Span } from '../../trainer-daemon/protocol/records';
import { conversationOf, turnText } from './conversation';

export interface CompareStep {
  readonly span: Span;
  /** What the step was asked: its last user / tool turn (the new input), or the whole prompt. */
  readonly prompt: string;
  readonly answer: string;
  readonly tokens: number;
  readonly latencyMs: number | null;
}

export interface AlignedPair {
  readonly left: number | null;
  readonly right: number | null;
  /** 0–1: how alike the two steps' prompts and answers are (0 for a gap). */
  readonly similarity: number;
}

export function compareSteps(spans: readonly Span[]): CompareStep[] {
  const sorted = [...spans].sort((a, b) => a.startMs - b.startMs || a.sequence - b.sequence);
  const llm = sorted.filter((span) => span.category === 'llm');
  return (llm.length > 0 ? llm : sorted).map((span) => {
    const conversation = conversationOf(span);
    const inputs = conversation.turns.filter((turn) => turn.role !== 'system' && turn.role !== 'assistant');
    const lastInput = inputs.at(-1);
    return {
      span,
      prompt: lastInput ? turnText(lastInput) : conversation.turns.map(turnText).join('\n'),
      answer: conversation.response.map(turnText).join('\n'),
      tokens: (span.promptTokens ?? 0) + (span.completionTokens ?? 0),
      latencyMs: span.endMs === null ? null : span.endMs - span.startMs,
    };
  });
}

/** At most this many words of a text count toward its similarity (long prompts: their start says enough). */
const SIGNATURE_WORDS = 64;

function signature(step: CompareStep): Set<string> {
  const words = `${step.span.name} ${step.prompt} ${step.answer}`.toLowerCase().split(/\W+/).filter(Boolean);
  return new Set(words.slice(0, SIGNATURE_WORDS).concat(words.slice(-SIGNATURE_WORDS)));
}

function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  if (a.size === 0 && b.size === 0) return 1;
  let common = 0;
  const [small, large] = a.size <= b.size ? [a, b] : [b, a];
  for (const word of small) if (large.has(word)) common += 1;
  return common / (a.size + b.size - common);
}

/** A gap costs this much; pairing two steps earns their similarity minus it (unlike steps are left apart). */
const GAP = 0.25;

/**
 * Needleman–Wunsch over the two step lists, scored by word-set similarity: alike steps are paired,
 * an inserted step (a retry, an extra tool call) leaves a gap on the other side.
 */
export function alignSteps(left: readonly CompareStep[], right: readonly CompareStep[]): AlignedPair[] {
  const a = left.map(signature);
  const b = right.map(signature);
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  const score = new Float64Array((n + 1) * width);
  const move = new Uint8Array((n + 1) * width); // 0 diagonal, 1 up (left only), 2 across (right only)
  const similarity = new Float64Array((n + 1) * width);
  for (let i = 1; i <= n; i += 1) {
    score[i * width] = -GAP * i;
    move[i * width] = 1;
  }
  for (let j = 1; j <= m; j += 1) {
    score[j] = -GAP * j;
    move[j] = 2;
  }
  for (let i = 1; i <= n; i += 1) {
    for (let j = 1; j <= m; j += 1) {
      const s = jaccard(a[i - 1]!, b[j - 1]!);
      similarity[i * width + j] = s;
      const diagonal = score[(i - 1) * width + j - 1]! + s * 2 - 1 + GAP;
      const up = score[(i - 1) * width + j]! - GAP;
      const across = score[i * width + j - 1]! - GAP;
      const best = Math.max(diagonal, up, across);
      score[i * width + j] = best;
      move[i * width + j] = best === diagonal ? 0 : best === up ? 1 : 2;
    }
  }
  const pairs: AlignedPair[] = [];
  for (let i = n, j = m; i > 0 || j > 0;) {
    const direction = move[i * width + j];
    if (i > 0 && j > 0 && direction === 0) {
      pairs.push({ left: i - 1, right: j - 1, similarity: similarity[i * width + j]! });
      i -= 1;
      j -= 1;
    } else if (i > 0 && (j === 0 || direction === 1)) {
      pairs.push({ left: i - 1, right: null, similarity: 0 });
      i -= 1;
    } else {
      pairs.push({ left: null, right: j - 1, similarity: 0 });
      j -= 1;
    }
  }
  return pairs.reverse();
}

export interface DiffPart {
  readonly op: 'same' | 'added' | 'removed';
  readonly text: string;
}

/** Word-level diffs beyond this many token pairs compare the changed middle as one replaced block. */
const MAX_DIFF_CELLS = 1_000_000;

/** The word diff of two texts (whitespace kept with its word): the parts in order, equal parts merged. */
export function wordDiff(before: string, after: string): DiffPart[] {
  if (before === after) return before ? [{ op: 'same', text: before }] : [];
  const a = before.match(/\s*\S+|\s+$/g) ?? [];
  const b = after.match(/\s*\S+|\s+$/g) ?? [];
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix += 1;
  let suffix = 0;
  while (
    suffix < a.length - prefix &&
    suffix < b.length - prefix &&
    a[a.length - 1 - suffix] === b[b.length - 1 - suffix]
  )
    suffix += 1;
  const midA = a.slice(prefix, a.length - suffix);
  const midB = b.slice(prefix, b.length - suffix);
  const parts: DiffPart[] = [];
  const push = (op: DiffPart['op'], text: string): void => {
    if (!text) return;
    const last = parts.at(-1);
    if (last?.op === op) parts[parts.length - 1] = { op, text: last.text + text };
    else parts.push({ op, text });
  };
  push('same', a.slice(0, prefix).join(''));
  if (midA.length * midB.length > MAX_DIFF_CELLS) {
    push('removed', midA.join(''));
    push('added', midB.join(''));
  } else {
    // Longest common subsequence of the changed middle, read back from the end.
    const width = midB.length + 1;
    const lcs = new Uint32Array((midA.length + 1) * width);
    for (let i = midA.length - 1; i >= 0; i -= 1) {
      for (let j = midB.length - 1; j >= 0; j -= 1) {
        lcs[i * width + j] =
          midA[i] === midB[j]
            ? lcs[(i + 1) * width + j + 1]! + 1
            : Math.max(lcs[(i + 1) * width + j]!, lcs[i * width + j + 1]!);
      }
    }
    let i = 0;
    let j = 0;
    while (i < midA.length || j < midB.length) {
      if (i < midA.length && j < midB.length && midA[i] === midB[j]) {
        push('same', midA[i]!);
        i += 1;
        j += 1;
      } else if (i < midA.length && (j === midB.length || lcs[(i + 1) * width + j]! >= lcs[i * width + j + 1]!)) {
        // Removed before added where both keep the common subsequence as long: a change reads old → new.
        push('removed', midA[i]!);
        i += 1;
      } else {
        push('added', midB[j]!);
        j += 1;
      }
    }
  }
  push('same', a.slice(a.length - suffix).join(''));
  return parts;
}

/** The two rollouts' totals side by side: steps, tokens, latency. */
export function compareTotals(steps: readonly CompareStep[]): { steps: number; tokens: number; latencyMs: number } {
  return {
    steps: steps.length,
    tokens: steps.reduce((sum, step) => sum + step.tokens, 0),
    latencyMs: steps.reduce((sum, step) => sum + (step.latencyMs ?? 0), 0),
  };
}
