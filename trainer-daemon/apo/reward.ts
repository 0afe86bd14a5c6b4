/**
 * APO's episode reward for a rollout: the shared policy (the latest human annotation, else the
 * agent's own reward, else an automatic one — lightningrl/credit.ts), and, when nobody gave one and
 * the task has an expected answer, a built-in rule: the agent's final answer matched against it.
 * Kept to one small function (`matchReward`) that a general rule engine can replace.
 */
import type { ApoConfig, Json, RolloutDetail } from '../protocol';
import { extractCalls } from '../lightningrl/adapter';

/** Lower case, accents and punctuation dropped, whitespace collapsed: "The answer: Paris." ≈ "the answer paris". */
export function normalizeAnswer(text: string): string {
  return text
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    // Punctuation goes, except a decimal point (3.14) and a minus sign (-5).
    .replace(/[^\p{L}\p{N}\s]/gu, (ch, at: number, all: string) => {
      const digitAfter = /\d/.test(all[at + 1] ?? '');
      if (ch === '.' && digitAfter && /\d/.test(all[at - 1] ?? '')) return ch;
      if (ch === '-' && digitAfter && !/[\p{L}\p{N}]/u.test(all[at - 1] ?? '')) return ch;
      return ' ';
    })
    .replace(/\s+/g, ' ')
    .trim();
}

/** The expected answer as text: a string, a number, or an object's `answer` field; else its JSON. */
function expectedText(expected: Json): string {
  if (typeof expected === 'string') return expected;
  if (typeof expected === 'number' || typeof expected === 'boolean') return String(expected);
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected) && 'answer' in expected) return expectedText(expected.answer!);
  return JSON.stringify(expected);
}

/**
 * 1 when the answer matches the expected one, else 0. `normalized`: equal after normalization;
 * `contains`: the normalized expected answer appears in the normalized answer as whole words.
 */
export function matchReward(answer: string, expected: Json, mode: Exclude<ApoConfig['match'], 'none'>): number {
  const got = normalizeAnswer(answer);
  const want = normalizeAnswer(expectedText(expected));
  if (want === '') return got === '' ? 1 : 0;
  if (mode === 'normalized') return got === want ? 1 : 0;
  return ` ${got} `.includes(` ${want} `) ? 1 : 0;
}

/** The agent's final answer: the text of its last LLM call (null when it made none). */
export function finalAnswer(detail: RolloutDetail): string | null {
  const calls = extractCalls(detail.spans, detail.rewards, 'reward');
  return calls.at(-1)?.text ?? null;
}
