/**
 * `lightning train --algorithm apo`: flags → APO configuration (errors name the flag), the run
 * with progress lines on stderr and Ctrl-C as a cancel, then a summary (best prompt, its
 * validation score against the seed's, the diff) or, with --json, the run's result.
 */
import type { TrainingFinished, TrainingStarted } from '../../protocol/cliLines';
import fs from 'node:fs';
import path from 'node:path';
import { ApoConfig, describeIssues, userUpstream, type ApoConfigInput, type ApoResult } from '../../protocol';
import { errorMessage, InvalidInputError, NotFoundError } from '../../protocol/errors';
import type { RpcClient } from '../../protocol/connection';
import { CancelledError } from '../../apo/evaluate';
import { runApo } from '../../apo/loop';
import { apoScoring } from '../../apo/reward';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { num } from '../format';
import { resolveStore, type GlobalOptions } from '../options';
import { parseUpstream } from './serve';

export interface ApoFlags extends GlobalOptions {
  algorithm: 'apo';
  resource?: string;
  dataset?: string;
  val?: string;
  beam?: string;
  branch?: string;
  rounds?: string;
  gradientBatch?: string;
  valBatch?: string;
  critiqueModel?: string;
  editModel?: string;
  temperature?: string;
  budgetCalls?: string;
  budgetRollouts?: string;
  seed?: string;
  callAttempts?: string;
  concurrency?: string;
  timeout?: string;
  match?: ApoConfig['match'];
  upstream?: string;
  promptFile?: string;
  rewards?: string;
}

/** The flag a configuration field comes from, for error messages. */
const FLAG: Partial<Record<keyof ApoConfig, string>> = { valDataset: '--val', timeoutMs: '--timeout' };
const flagOf = (field: string): string =>
  FLAG[field as keyof ApoConfig] ?? `--${field.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** A flag's number; text that is not one stays text, so the schema names the flag; absent: the schema's default. */
const number = (value: string | undefined): number | string | undefined =>
  value === undefined || value.trim() === '' || !Number.isFinite(Number(value)) ? value : Number(value);

export function apoConfigFromFlags(flags: ApoFlags): ApoConfig {
  if (!flags.resource)
    throw new InvalidInputError('--resource: required with --algorithm apo (the prompt template resource to optimize)');
  if (!flags.dataset) throw new InvalidInputError('--dataset: required (the training tasks)');
  const timeout = number(flags.timeout);
  const input: { [K in keyof ApoConfigInput]: unknown } = {
    resource: flags.resource,
    dataset: flags.dataset,
    valDataset: flags.val ?? null,
    beam: number(flags.beam),
    branch: number(flags.branch),
    rounds: number(flags.rounds),
    gradientBatch: number(flags.gradientBatch),
    valBatch: number(flags.valBatch),
    critiqueModel: flags.critiqueModel,
    editModel: flags.editModel,
    temperature: number(flags.temperature),
    budgetCalls: number(flags.budgetCalls),
    budgetRollouts: number(flags.budgetRollouts),
    seed: number(flags.seed),
    callAttempts: number(flags.callAttempts),
    concurrency: number(flags.concurrency),
    timeoutMs: typeof timeout === 'number' ? Math.round(timeout * 1000) : timeout,
    match: flags.match,
    promptFile: flags.promptFile === undefined ? null : path.resolve(flags.promptFile),
    rewardsFile: flags.rewards === undefined ? null : path.resolve(flags.rewards),
  };
  const parsed = ApoConfig.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = String(issue.path[0] ?? '');
    throw new InvalidInputError(
      `${flagOf(field)}: ${
        describeIssues(parsed.error, '')
          .replace(/^[^:]*: /, '')
          .split('; ')[0]
      } (got ${JSON.stringify(input[field as keyof ApoConfig])})`,
    );
  }
  return parsed.data;
}

function summary(result: ApoResult): string {
  const lines = [
    `APO run ${result.runId}: ${result.roundsCompleted} round(s), ${result.llmCalls} LLM calls, ${result.rollouts} rollouts (${result.stopReason}).`,
    `Validation score: seed ${num(result.seed.valScore)} → best ${num(result.best.valScore)} (${result.best.candidateId}, ${result.resource} version ${result.best.version}).`,
  ];
  if (result.skipped.length)
    lines.push(
      `Skipped branches: ${result.skipped.map((s) => `round ${s.round} ${s.parentId} ${s.stage}: ${s.error}`).join('; ')}`,
    );
  if (result.diff)
    lines.push(
      '',
      'Best prompt vs the seed:',
      result.diff,
      '',
      `Keep it: npx lightning resource set-current ${result.resource} ${result.best.version}`,
    );
  else lines.push('No candidate beat the seed prompt.');
  return lines.join('\n');
}

/** With --prompt-file, the file is the seed: stored as the resource's new current version unless it already is. */
async function seedFromPromptFile(client: RpcClient, config: ApoConfig): Promise<void> {
  if (config.promptFile === null) return;
  let text: string;
  try {
    text = fs.readFileSync(config.promptFile, 'utf8');
  } catch (error) {
    throw new NotFoundError(`--prompt-file: cannot read ${config.promptFile}: ${errorMessage(error)}`);
  }
  const { items } = await client.request('listResources', {});
  const existing = items.some((r) => r.name === config.resource)
    ? (await client.request('getResource', { name: config.resource })).resource
    : undefined;
  if (existing?.value !== text)
    await client.request('putResource', { name: config.resource, kind: 'prompt_template', value: text });
}

export async function runApoCommand(argv: string[], flags: ApoFlags): Promise<void> {
  const config = apoConfigFromFlags(flags);
  const own = userUpstream(process.env);
  const upstream =
    own !== null ? parseUpstream(own, 'OPENAI_BASE_URL') : flags.upstream ? parseUpstream(flags.upstream) : null;
  const storeFile = resolveStore(flags);
  const scoring = apoScoring(config, storeFile, process.env);
  const { client, close } = await connectOrStartDaemon(storeFile);
  const abort = new AbortController();
  const cancel = (): void => {
    process.stderr.write('lightning: cancelling the training run: stopping the running agents\n');
    abort.abort();
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of signals) process.on(signal, cancel);
  try {
    await seedFromPromptFile(client, config);
    let result: ApoResult;
    try {
      result = await runApo(
        {
          client,
          config,
          argv,
          upstream,
          apiKey: process.env.OPENAI_API_KEY || undefined,
          env: process.env,
          logDir: path.join(path.dirname(storeFile), 'logs'),
          scoring,
          signal: abort.signal,
        },
        {
          started: (runId) =>
            process.stdout.write(
              flags.json
                ? `${JSON.stringify({ event: 'training-started', algorithm: 'apo', runId } satisfies TrainingStarted)}\n`
                : `APO run ${runId}\n`,
            ),
          progress: (line) => process.stderr.write(`apo: ${line}\n`),
        },
      );
    } catch (error) {
      // Cancelled before the seed was even scored: nothing to report but that.
      if (!(error instanceof CancelledError)) throw error;
      process.stderr.write('lightning: the training run was cancelled before the seed prompt was scored\n');
      process.exitCode = 130;
      return;
    }
    if (result.stopReason === 'cancelled') process.exitCode = 130;
    process.stdout.write(
      flags.json
        ? `${JSON.stringify({ event: 'training-finished', algorithm: 'apo', ...result } satisfies TrainingFinished)}\n`
        : `${summary(result)}\n`,
    );
  } finally {
    for (const signal of signals) process.off(signal, cancel);
    await close();
  }
}
