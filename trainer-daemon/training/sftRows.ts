/**
 * The rows an SFT run trains and validates on (protocol/sft.ts): the chat examples `lightning export --format chat`
 * writes for the same filters and `--min-reward` (whole answers only, tool calls included, scrubbed of secrets by
 * value as the export is), each as the trainer worker's `SftExample` (the prompt messages and tools, the
 * assistant's reply as the completion). A share of the rollouts is held out for validation, chosen by a hash of the
 * run's seed and each rollout's id: a rollout's calls all sit on one side. The split a run started with is kept
 * (`SftSplit`, saved beside its checkpoints): a resumed run puts each of those rollouts on the side it was on,
 * whatever was rated since; a rollout rated since goes by its hash alone.
 */
import { createHash } from 'node:crypto';
import { describeIssues, SftExample, type ExportReport, type Json, type SftConfig, type Trajectory } from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import { scrubJsonValues } from '../protocol/recordScrub';
import { buildTransitions, toChatExample } from '../lightningrl/transitions';

/** The rollout statuses an SFT run reads, as `lightning export`'s default: the rating decides, not the exit. */
export const SFT_ROLLOUT_STATUSES = ['succeeded', 'failed', 'timeout'] as const;

export interface SftRows {
  readonly train: SftExample[];
  readonly val: SftExample[];
  /** Rollouts with rows on each side. */
  readonly trainRollouts: number;
  readonly valRollouts: number;
  /** Which rollouts are on which side: what a resumed run keeps. */
  readonly split: SftSplit;
  /** What LightningRL left out (no reward, below the threshold, no call), as the export reports it. */
  readonly report: ExportReport;
  /** Calls with no chat form or an empty reply, by why. */
  readonly notChat: Record<string, number>;
}

/**
 * A chat example (`{messages, tools?}`, the last message the assistant's) as a demonstration; `where` prefixes an
 * error (a warm-start file's line, a rollout's call).
 */
export function chatToSftExample(example: { messages?: unknown; tools?: unknown }, where: string): SftExample {
  const messages = Array.isArray(example.messages) ? (example.messages as Array<Record<string, unknown>>) : undefined;
  const last = messages?.at(-1);
  if (!messages || !last || last.role !== 'assistant')
    throw new InvalidInputError(`${where}: the last message must be the assistant's`);
  const completion = SftExample.shape.completion.safeParse({
    ...(typeof last.content === 'string' ? { content: last.content } : {}),
    ...(Array.isArray(last.tool_calls) && last.tool_calls.length > 0 ? { tool_calls: last.tool_calls } : {}),
  });
  if (!completion.success)
    throw new InvalidInputError(`${where}: the assistant's message: ${describeIssues(completion.error, 'completion')}`);
  if (completion.data.content === undefined && completion.data.tool_calls === undefined)
    throw new InvalidInputError(`${where}: the assistant's message has neither content nor tool_calls`);
  const tools = example.tools === undefined ? undefined : SftExample.shape.tools.safeParse(example.tools);
  if (tools && !tools.success)
    throw new InvalidInputError(
      `${where}: tools must be a list of tool objects (${describeIssues(tools.error, 'tools')})`,
    );
  return {
    messages: messages.slice(0, -1),
    ...(tools?.data ? { tools: tools.data } : {}),
    completion: completion.data,
  };
}

/** Where a rollout falls: [0, 1), from the run's seed and its id (stable across resumes and new ratings). */
function splitPoint(seed: number, rolloutId: string): number {
  return createHash('sha256').update(`${seed}:${rolloutId}`).digest().readUInt32BE(0) / 2 ** 32;
}

/** The rollouts an SFT run trained and validated on, by id (a resumed run reads it back). */
export interface SftSplit {
  readonly train: readonly string[];
  readonly val: readonly string[];
}

/**
 * The rollouts held out: those whose split point is below `fraction`; at least one when fraction > 0, never all. With
 * the split a run started with (`earlier`), each of its rollouts stays on its side, and only a rollout new since is
 * placed, by its point alone: the at-least-one and never-all rules chose among the first rollouts, not again.
 */
export function heldOutRollouts(
  rolloutIds: readonly string[],
  fraction: number,
  seed: number,
  earlier?: SftSplit,
): Set<string> {
  const ids = [...new Set(rolloutIds)];
  if (earlier) {
    const val = new Set(earlier.val);
    const train = new Set(earlier.train);
    return new Set(
      ids.filter((id) => val.has(id) || (!train.has(id) && fraction > 0 && splitPoint(seed, id) < fraction)),
    );
  }
  if (fraction <= 0 || ids.length < 2) return new Set();
  const ranked = ids.map((id) => ({ id, at: splitPoint(seed, id) })).sort((a, b) => a.at - b.at);
  const below = ranked.filter((r) => r.at < fraction).length;
  const count = Math.min(Math.max(below, 1), ids.length - 1);
  return new Set(ranked.slice(0, count).map((r) => r.id));
}

/**
 * The rows of `trajectories` (already filtered by status, mode, label and dataset) under the run's config; `earlier`:
 * the split the run started with, when it resumes.
 */
export function sftRows(trajectories: Iterable<Trajectory>, config: SftConfig, earlier?: SftSplit): SftRows {
  const { transitions, report } = buildTransitions(trajectories, {
    reward: { name: config.rewardName, missing: 'exclude', fillValue: 0 },
    credit: { kind: 'identical' },
    advantage: { kind: 'none', normalizeStd: false, std: 'sample', epsilon: 1e-4 },
    ...(config.agent === null ? {} : { agentMatch: new RegExp(config.agent) }),
    minReward: config.minReward,
  });
  const notChat: Record<string, number> = {};
  const rows: Array<{ rolloutId: string; example: SftExample }> = [];
  for (const transition of transitions) {
    const chat = toChatExample(transition);
    if ('reason' in chat) {
      notChat[chat.reason] = (notChat[chat.reason] ?? 0) + 1;
      continue;
    }
    try {
      const scrubbed = scrubJsonValues(chat.example as unknown as Json) as unknown as typeof chat.example;
      rows.push({ rolloutId: transition.rolloutId, example: chatToSftExample(scrubbed, 'call') });
    } catch (error) {
      const why = error instanceof InvalidInputError ? error.message.replace(/^call: /, '') : String(error);
      notChat[why] = (notChat[why] ?? 0) + 1;
    }
  }
  const held = heldOutRollouts(
    rows.map((r) => r.rolloutId),
    config.valFraction,
    config.seed,
    earlier,
  );
  const train = rows.filter((r) => !held.has(r.rolloutId));
  const val = rows.filter((r) => held.has(r.rolloutId));
  const trainIds = [...new Set(train.map((r) => r.rolloutId))];
  return {
    train: train.map((r) => r.example),
    val: val.map((r) => r.example),
    trainRollouts: trainIds.length,
    valRollouts: held.size,
    split: { train: trainIds, val: [...held] },
    report,
    notChat,
  };
}

/** Why there is nothing to fine-tune on, naming the flags that change it. */
export function noRowsMessage(rows: SftRows, config: SftConfig): string {
  const { report } = rows;
  const why: string[] = [];
  if (report.rollouts === 0) why.push('no rollout matches --dataset/--label/--mode');
  if (report.excludedNoReward > 0)
    why.push(
      `${report.excludedNoReward} rollout(s) have no "${config.rewardName}" reward (rate them: Good in the panel, or lightning reward ID 1)`,
    );
  if (report.excludedBelowMinReward > 0)
    why.push(`${report.excludedBelowMinReward} rollout(s) are rated below --min-reward ${config.minReward}`);
  if (report.excludedNoCalls > 0)
    why.push(`${report.excludedNoCalls} rollout(s) have no whole LLM call${config.agent ? ' of --agent' : ''}`);
  const notChat = Object.entries(rows.notChat);
  if (notChat.length > 0)
    why.push(`calls with no chat form: ${notChat.map(([reason, count]) => `${count} (${reason})`).join('; ')}`);
  return `no rated rollout to fine-tune on: ${why.join('; ') || 'nothing recorded'}`;
}
