/**
 * Rules: deterministic rewards from a rollout's final answer and record. Answer rules compare the
 * final answer (see ScoringTrajectory.finalAnswer) with the task's expected answer and are skipped
 * when the task has none; record rules (tool called, penalties) always apply.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Json, RuleConfig, ScoringTask, ScoringTrajectory } from '../protocol';
import { assertNever } from '../protocol/assert';

export type Verdict = { kind: 'scored'; value: number; reason: string | null } | { kind: 'skipped'; reason: string };

const scored = (value: number, reason: string): Verdict => ({ kind: 'scored', value, reason });
const skipped = (reason: string): Verdict => ({ kind: 'skipped', reason });
const match = (ok: boolean, what: string): Verdict =>
  scored(ok ? 1 : 0, ok ? `${what} matches` : `${what} does not match`);

/** The value at a dotted path (`a.b.0`); undefined when the path does not exist. */
export function atPath(value: Json | undefined, path: string): Json | undefined {
  if (path === '') return value;
  let current = value;
  for (const key of path.split('.')) {
    if (current === null || typeof current !== 'object') return undefined;
    current = Array.isArray(current) ? current[Number(key)] : current[key];
  }
  return current;
}

/**
 * SQuAD's answer normalization: lower case, no accents, no punctuation, no articles, single spaces —
 * except that a number's sign is kept ("-5" is not "5"; "well-known" is still "well known").
 */
export function normalizeAnswer(text: string): string {
  return text
    .normalize('NFKD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/[\p{P}\p{S}]/gu, (mark, at: number, whole: string) =>
      (mark === '-' || mark === '+') && /\d/.test(whole[at + 1] ?? '') && !/[\p{L}\p{N}]/u.test(whole[at - 1] ?? '')
        ? mark
        : ' ',
    )
    .replace(/\b(a|an|the)\b/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

const NUMBER = /[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?/g;

/** The last number written in `text` (thousands separators allowed), or null. */
export function lastNumber(text: string): number | null {
  const found = [...text.matchAll(NUMBER)].map((m) => m[0]).filter((m) => /\d/.test(m));
  if (found.length === 0) return null;
  const value = Number(found.at(-1)!.replace(/,/g, ''));
  return Number.isFinite(value) ? value : null;
}

/** The answer as JSON: the whole text, else its first {…} or […] block (models wrap JSON in prose and fences). */
export function parseJsonAnswer(text: string): Json | undefined {
  const attempts = [
    text,
    text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1),
    text.slice(text.indexOf('['), text.lastIndexOf(']') + 1),
  ];
  for (const candidate of attempts) {
    if (candidate.trim() === '') continue;
    try {
      return JSON.parse(candidate) as Json;
    } catch {
      // Try the next reading.
    }
  }
  return undefined;
}

/**
 * The expected answer at `path`; with no path, an expected object with an `answer` field is compared
 * by that field (`{"answer": "Oslo", "source": …}` → `Oslo`), as datasets often store it.
 */
function expectedAnswer(expected: Json | undefined, path: string): Json | undefined {
  const value = atPath(expected, path);
  if (path === '' && value !== null && typeof value === 'object' && !Array.isArray(value) && 'answer' in value)
    return value.answer;
  return value;
}

function asText(value: Json): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

type AnswerRule = Extract<RuleConfig, { expectedPath: string }>;

function compareAnswer(rule: AnswerRule, answer: string, expected: Json): Verdict {
  switch (rule.rule) {
    case 'exact': {
      const [a, e] = rule.caseSensitive
        ? [answer.trim(), asText(expected).trim()]
        : [answer.trim().toLowerCase(), asText(expected).trim().toLowerCase()];
      return match(a === e, 'answer');
    }
    case 'normalized': {
      const [a, e] = [normalizeAnswer(answer), normalizeAnswer(asText(expected))];
      // Containment is of whole words: "15" does not contain the answer "5".
      return rule.contains
        ? match(e !== '' && ` ${a} `.includes(` ${e} `), 'normalized answer (contains)')
        : match(a === e, 'normalized answer');
    }
    case 'numeric': {
      const want = typeof expected === 'number' ? expected : lastNumber(asText(expected));
      if (want === null) return skipped('the expected answer is not a number');
      const got = lastNumber(answer);
      if (got === null) return scored(0, 'no number in the answer');
      const ok = Math.abs(got - want) <= rule.absTol + rule.relTol * Math.abs(want);
      return scored(ok ? 1 : 0, `${got} ${ok ? 'is within' : 'is not within'} tolerance of ${want}`);
    }
    case 'regex': {
      const pattern = rule.pattern ?? asText(expected);
      let regex: RegExp;
      try {
        regex = new RegExp(pattern, rule.flags);
      } catch (error) {
        throw new Error(`invalid pattern ${JSON.stringify(pattern)}: ${(error as Error).message}`, { cause: error });
      }
      return match(regex.test(answer), `pattern /${pattern}/${rule.flags}`);
    }
    case 'json': {
      const parsed = parseJsonAnswer(answer);
      if (parsed === undefined) return scored(0, 'the answer is not JSON');
      const got = atPath(parsed, rule.path);
      if (got === undefined) return scored(0, `the answer has no field ${rule.path}`);
      return match(isDeepStrictEqual(got, expected), rule.path ? `field ${rule.path}` : 'JSON answer');
    }
    default:
      return assertNever(rule);
  }
}

/** Applies one rule to one rollout. Throws only for a rule that cannot run at all (an invalid pattern). */
export function applyRule(rule: RuleConfig, trajectory: ScoringTrajectory, task: ScoringTask): Verdict {
  switch (rule.rule) {
    case 'tool-called': {
      const count = trajectory.toolCalls.filter((call) => call.name === rule.tool).length;
      return scored(count >= rule.min ? 1 : 0, `${rule.tool} called ${count} time${count === 1 ? '' : 's'}`);
    }
    case 'error-penalty': {
      const failed = trajectory.status === 'failed' || trajectory.errorSpans > 0;
      return scored(
        failed ? rule.value : 0,
        failed ? `rollout ${trajectory.status}, ${trajectory.errorSpans} error span(s)` : 'no errors',
      );
    }
    case 'timeout-penalty':
      return scored(
        trajectory.status === 'timeout' ? rule.value : 0,
        trajectory.status === 'timeout' ? 'timed out' : 'did not time out',
      );
    case 'steps-penalty':
      return scored(trajectory.steps > rule.max ? rule.value : 0, `${trajectory.steps} LLM calls (max ${rule.max})`);
    case 'tokens-penalty': {
      const tokens = trajectory.promptTokens + trajectory.completionTokens;
      return scored(tokens > rule.max ? rule.value : 0, `${tokens} tokens (max ${rule.max})`);
    }
    case 'exact':
    case 'normalized':
    case 'numeric':
    case 'regex':
    case 'json': {
      const expected = expectedAnswer(task.expected ?? undefined, rule.expectedPath);
      // A regex with its own pattern needs no expected answer.
      const needsExpected = !(rule.rule === 'regex' && rule.pattern !== undefined);
      if (needsExpected && (expected === undefined || expected === null))
        return skipped(
          rule.expectedPath ? `the task has no expected ${rule.expectedPath}` : 'the task has no expected answer',
        );
      if (trajectory.finalAnswer === null) return scored(0, 'no final answer');
      return compareAnswer(rule, trajectory.finalAnswer, expected ?? null);
    }
    default:
      return assertNever(rule);
  }
}
