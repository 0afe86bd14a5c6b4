/**
 * The LLM judge: a rubric, and a model behind any OpenAI-compatible API. `absolute` scores each
 * rollout alone; `relative` ranks the rollouts of one task together (ART's RULER: scores relative
 * within the group, what GRPO's advantages need). Replies are parsed with a zod schema and, when
 * malformed, asked for again with the problem named. The transport records each judge call as a
 * rollout of its own (through the daemon's proxy).
 */
import { z } from 'zod';
import { describeIssues, type RewardSourceConfig, type ScoringTask, type ScoringTrajectory } from '../protocol';
import { errorMessage } from '../protocol/errors';
import { parseJsonAnswer } from './rules';

export type JudgeConfig = Extract<RewardSourceConfig, { type: 'judge' }>;

export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant';
  readonly content: string;
}

/** One judging (its first ask and its retries): recorded as one rollout, finished once. */
export interface JudgeSession {
  /** Sends one chat completion; returns the assistant's content. */
  complete(messages: readonly ChatMessage[]): Promise<string>;
  finish(error: string | null): Promise<void>;
}

/** Opens a judging of the given rollouts. */
export type JudgeTransport = (config: JudgeConfig, judged: readonly string[]) => Promise<JudgeSession>;

const Score = z.number().min(0, 'score must be between 0 and 1').max(1, 'score must be between 0 and 1');
const AbsoluteReply = z.object({ score: Score, reason: z.string().max(2_000).default('') });
const RelativeReply = z.object({
  scores: z.array(z.object({ id: z.number().int(), score: Score, reason: z.string().max(2_000).default('') })),
});

export interface JudgeScore {
  readonly value: number;
  readonly reason: string;
}

const MAX_CHARS = 6_000;

function clip(text: string, max = MAX_CHARS): string {
  return text.length > max ? `${text.slice(0, max)}… [${text.length - max} more characters]` : text;
}

const show = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value, null, 1));

/** What the judge reads of one rollout: its final answer and what it did to get there. */
function describeTrajectory(trajectory: ScoringTrajectory): string {
  const tools = trajectory.toolCalls.map((call) => `${call.name}(${clip(call.arguments, 300)})`).join(', ');
  return clip(
    [
      `status: ${trajectory.status}${trajectory.error ? ` (${trajectory.error})` : ''}`,
      `LLM calls: ${trajectory.steps}`,
      `tools called: ${tools || 'none'}`,
      `final answer: ${trajectory.finalAnswer ?? '(none)'}`,
    ].join('\n'),
  );
}

function describeTask(task: ScoringTask): string {
  return [
    `Task:\n${clip(show(task.input), 3_000)}`,
    task.expected !== null ? `Reference answer:\n${clip(show(task.expected), 2_000)}` : '',
  ]
    .filter(Boolean)
    .join('\n\n');
}

const SYSTEM =
  'You are a careful, strict evaluator of AI agent runs. Follow the rubric. Reply with only a JSON object, no prose, no code fences.';

export function absolutePrompt(rubric: string, trajectory: ScoringTrajectory, task: ScoringTask): ChatMessage[] {
  return [
    { role: 'system', content: SYSTEM },
    {
      role: 'user',
      content: `Rubric:\n${rubric}\n\n${describeTask(task)}\n\nThe agent's run:\n${describeTrajectory(trajectory)}\n\nScore the run from 0 (worst) to 1 (best). Reply as {"score": <number 0..1>, "reason": "<one sentence>"}.`,
    },
  ];
}

export function relativePrompt(
  rubric: string,
  trajectories: readonly ScoringTrajectory[],
  task: ScoringTask,
): ChatMessage[] {
  const runs = trajectories.map((t, i) => `### Run ${i + 1}\n${describeTrajectory(t)}`).join('\n\n');
  return [
    { role: 'system', content: SYSTEM },
    {
      role: 'user',
      content:
        `Rubric:\n${rubric}\n\n${describeTask(task)}\n\n${trajectories.length} runs of the agent on this task:\n\n${runs}\n\n` +
        'Compare the runs with each other and score each from 0 (worst) to 1 (best); better runs get higher scores. ' +
        `Reply as {"scores": [{"id": <run number>, "score": <number 0..1>, "reason": "<one sentence>"}, …]} with one entry for each run 1..${trajectories.length}.`,
    },
  ];
}

/** Parses a reply against `schema`; the error says what to fix. */
function parseReply<T>(content: string, schema: z.ZodType<T>): { ok: true; value: T } | { ok: false; problem: string } {
  const json = parseJsonAnswer(content);
  if (json === undefined) return { ok: false, problem: 'the reply is not JSON' };
  const parsed = schema.safeParse(json);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : { ok: false, problem: describeIssues(parsed.error, 'reply') };
}

/** Asks, parses and, while the reply is malformed and retries are left, asks again naming the problem. */
async function askUntilValid<T>(
  transport: JudgeTransport,
  config: JudgeConfig,
  messages: ChatMessage[],
  judged: readonly string[],
  parse: (content: string) => { ok: true; value: T } | { ok: false; problem: string },
): Promise<T> {
  const conversation = [...messages];
  const session = await transport(config, judged);
  let problem = '';
  try {
    for (let attempt = 0; attempt <= config.maxRetries; attempt += 1) {
      const content = await session.complete(conversation);
      const result = parse(content);
      if (result.ok) {
        await session.finish(null);
        return result.value;
      }
      problem = result.problem;
      conversation.push(
        { role: 'assistant', content },
        {
          role: 'user',
          content: `That reply was not valid (${problem}). Reply again with only the JSON object described above.`,
        },
      );
    }
  } catch (error) {
    await session.finish(errorMessage(error));
    throw error;
  }
  const message = `the judge's reply was malformed after ${config.maxRetries + 1} attempt(s): ${problem}`;
  await session.finish(message);
  throw new Error(message);
}

export function judgeAbsolute(
  transport: JudgeTransport,
  config: JudgeConfig,
  trajectory: ScoringTrajectory,
  task: ScoringTask,
): Promise<JudgeScore> {
  return askUntilValid(
    transport,
    config,
    absolutePrompt(config.rubric, trajectory, task),
    [trajectory.rolloutId],
    (content) => {
      const reply = parseReply(content, AbsoluteReply);
      return reply.ok ? { ok: true, value: { value: reply.value.score, reason: reply.value.reason } } : reply;
    },
  );
}

/** Scores for the rollouts of one task, in the order given. */
export function judgeRelative(
  transport: JudgeTransport,
  config: JudgeConfig,
  trajectories: readonly ScoringTrajectory[],
  task: ScoringTask,
): Promise<JudgeScore[]> {
  const count = trajectories.length;
  return askUntilValid(
    transport,
    config,
    relativePrompt(config.rubric, trajectories, task),
    trajectories.map((t) => t.rolloutId),
    (content) => {
      const reply = parseReply(content, RelativeReply);
      if (!reply.ok) return reply;
      const byId = new Map(reply.value.scores.map((entry) => [entry.id, entry]));
      const missing = Array.from({ length: count }, (_, i) => i + 1).filter((id) => !byId.has(id));
      if (missing.length > 0 || byId.size !== count)
        return {
          ok: false,
          problem: `give exactly one score for each run 1..${count}${missing.length ? ` (missing ${missing.join(', ')})` : ''}`,
        };
      return {
        ok: true,
        value: trajectories.map((_, i) => ({
          value: byId.get(i + 1)!.score,
          reason: `relative to ${count} runs of the task: ${byId.get(i + 1)!.reason}`,
        })),
      };
    },
  );
}
