/**
 * The APO tests' world: a sums dataset, a prompt-dependent scripted model, critique and edit scripts, and how to run
 * `lightning train`.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { CRITIQUE_SYSTEM, EDIT_SYSTEM } from '../../trainer-daemon/apo/prompts';
import { ApoResult, type ApoCandidate } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli } from './daemon';
import { startScriptedUpstream, type ChatScript, type ScriptedUpstream } from './scriptedUpstream';
import { tempDir } from './tmp';
import { parsed } from './params';

/**
 * The task: add two numbers. The scripted model answers sums under ten in words ("five", which the
 * expected "5" does not match) unless the agent's prompt asks for digits. The critique model
 * suggests that instruction in its `failures` and `rules` styles (an unhelpful one in `contrast`),
 * and the edit model appends the critique's instruction to the prompt: a prompt can only improve
 * through the critiques. Validation: 2 of 4 sums are under ten, so the seed scores 0.5.
 */
export const WORDS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'];
export const SEED_PROMPT = 'Add the numbers {a} and {b}.';
export const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'prompted-agent.mjs');
export const PAIRS = [
  [2, 3],
  [7, 8],
  [1, 4],
  [9, 9],
  [3, 3],
  [6, 5],
  [2, 2],
  [8, 4],
  [4, 1],
  [5, 7],
] as const;

/**
 * Flags for tests of the optimizer's logic rather than of how its agents start: one long-lived agent worker per
 * batch (worker mode, holding --concurrency rollouts at once) instead of a process per rollout, far fewer processes.
 * The main test in apo.test.ts, the prompt-file and editor tests run one process per rollout (the default);
 * apoDeterminism.test.ts checks that both modes give the same run.
 */
export const WORKERS = ['--workers', '1'];

/** The agents' log files of a run's batches: one per worker (worker mode) or one per rollout attempt. */
export function agentLogs(cwd: string, runId: string): { workers: number; rollouts: number } {
  const files = fs
    .readdirSync(path.join(cwd, '.lightning', 'logs', runId), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.log'))
    .map((file) => path.basename(file));
  const workers = files.filter((file) => file.startsWith('worker-')).length;
  return { workers, rollouts: files.length - workers };
}

export interface Script {
  readonly chat: ChatScript;
  readonly calls: { critique: number; edit: number; agent: string[] };
}

function between(text: string, tag: string): string {
  return new RegExp(`<${tag}>\\n([\\s\\S]*?)\\n</${tag}>`).exec(text)?.[1] ?? '';
}

export function script(): Script {
  const calls = { critique: 0, edit: 0, agent: [] as string[] };
  const chat: ChatScript = (body) => {
    const messages = body.messages as Array<{ content: string }>;
    const system = messages[0]!.content;
    const model = String(body.model);
    if (system === CRITIQUE_SYSTEM) {
      calls.critique += 1;
      if (model === 'critic-flaky' && calls.critique % 3 === 1)
        return { status: 500, body: '{"error":{"message":"overloaded"}}' };
      const user = messages[1]!.content;
      const style = /Critique style: (\w+)/.exec(user)![1];
      const instruction = between(user, 'prompt').includes('digits')
        ? 'Be brief.'
        : style === 'contrast'
          ? 'Be polite.'
          : 'Answer with digits only.';
      return `The low-reward answers spell numbers out. Add the instruction: ${instruction}`;
    }
    if (system === EDIT_SYSTEM) {
      calls.edit += 1;
      const user = messages[1]!.content;
      const instruction = /Add the instruction: (.*)/.exec(between(user, 'critique'))![1]!;
      if (model === 'editor-broken') return 'Sure! Here is a better prompt, I hope you like it.';
      if (model === 'editor-sloppy' && calls.edit % 2 === 1)
        return `<prompt>\nAdd the numbers.\n${instruction}\n</prompt>`;
      return `<prompt>\n${between(user, 'prompt')}\n${instruction}\n</prompt>`;
    }
    calls.agent.push(system);
    const [a, b] = /(\d+) and (\d+)/.exec(system)!.slice(1).map(Number) as [number, number];
    const sum = a + b;
    return system.includes('digits') || sum >= 10 ? String(sum) : WORDS[sum]!;
  };
  return { chat, calls };
}

export async function setUp(
  t: Parameters<typeof tempDir>[0],
): Promise<{ cwd: string; upstream: ScriptedUpstream; calls: Script['calls'] }> {
  const cwd = tempDir(t);
  const lines = PAIRS.map(([a, b], i) =>
    JSON.stringify({ id: `sum-${i}`, split: i < 6 ? 'train' : 'val', a, b, expected: String(a + b) }),
  );
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), lines.join('\n'));
  fs.writeFileSync(path.join(cwd, 'prompt.txt'), SEED_PROMPT);
  assert.equal((await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'sums'], { cwd })).code, 0);
  const put = await runCli(['resource', 'put', 'prompt', '--file', 'prompt.txt'], { cwd });
  assert.equal(put.code, 0, put.stderr);
  assert.match(put.stdout, /prompt version 1 \(current\); placeholders \{a\}, \{b\}/);
  const { chat, calls } = script();
  const upstream = await startScriptedUpstream({ chat });
  t.after(() => upstream.close());
  return { cwd, upstream, calls };
}

export function train(
  cwd: string,
  upstream: ScriptedUpstream,
  flags: string[],
  env: NodeJS.ProcessEnv = {},
): ReturnType<typeof runCli> {
  return runCli(
    [
      'train',
      '--algorithm',
      'apo',
      '--resource',
      'prompt',
      '--dataset',
      'sums',
      '--json',
      '--concurrency',
      '4',
      ...flags,
      '--',
      process.execPath,
      AGENT,
    ],
    {
      cwd,
      env: {
        LIGHTNING_UPSTREAM_URL: upstream.url,
        OPENAI_BASE_URL: '',
        OPENAI_API_BASE: '',
        OPENAI_API_KEY: '',
        ...env,
      },
    },
  );
}

export function storeOf(cwd: string): Store {
  return Store.open(path.join(cwd, '.lightning', 'store.db'));
}

export function allRollouts(store: Store, mode: 'train' | 'val' | 'optimizer') {
  return store.listRollouts(parsed('listRollouts', { mode, limit: 500 })).items;
}

/** `train --json` output: a `training-started` line with the run id, then the run's result. */
export function finished(stdout: string): ApoResult {
  const [started, result, ...rest] = stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { event: string; runId: string });
  assert.deepEqual([started!.event, result!.event, rest.length], ['training-started', 'training-finished', 0]);
  assert.equal(started!.runId, result!.runId);
  return ApoResult.parse(result);
}

/** A leaderboard without run-specific ids and times, to compare runs. */
export function board(candidates: readonly ApoCandidate[]): unknown[] {
  return candidates.map((c) => [c.id, c.parentId, c.prompt, c.critiqueStyle, c.batchScore, c.valScore, c.rollouts]);
}
