/**
 * `lightning export`: rollouts → LightningRL transitions (one JSON line per training sample, with
 * reward and advantage) or OpenAI fine-tuning chat examples. Reads the store directly (a reader
 * never blocks the daemon in WAL mode) and writes the file atomically: a failed export leaves no
 * half-written file behind.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Option, type Command } from 'commander';
import {
  AdvantageOptions,
  CreditOptions,
  ExportReport,
  RewardPolicy,
  RolloutMode,
  RolloutStatus,
  Transition,
  describeIssues,
  describeSkipped,
  type Json,
} from '../../protocol';
import { errorMessage, InvalidInputError, NotFoundError } from '../../protocol/errors';
import { registerSecretValue } from '../../protocol/secrets';
import { scrubJsonValues } from '../../protocol/recordScrub';
import { buildTransitions, toChatExample, TOKEN_CAP_REASON } from '../../lightningrl/transitions';
import { writeFileAtomically } from '../../util/privateFiles';
import { Store } from '../../store/store';
import { announceUpgrade } from '../backend';
import { resolveStore, storeOption, type GlobalOptions } from '../options';

interface ExportOptions extends GlobalOptions {
  format: 'transitions' | 'chat';
  out: string;
  status: string;
  mode?: RolloutMode;
  label?: string;
  dataset?: string;
  batch?: string;
  agent?: string;
  policy?: string;
  minReward?: string;
  rewardName: string;
  missingReward: 'exclude' | 'fill';
  fillValue: string;
  credit: 'identical' | 'discounted' | 'step';
  gamma: string;
  advantage: 'grpo' | 'baseline' | 'none';
  stdNormalize: boolean;
  aggregate?: boolean;
  includeFailed?: boolean;
}

function number(value: string, flag: string): number {
  const parsed = Number(value);
  if (value.trim() === '' || !Number.isFinite(parsed)) throw new InvalidInputError(`${flag} ${value}: not a number`);
  return parsed;
}

function parsed<T>(
  schema: { safeParse(value: unknown): { success: true; data: T } | { success: false; error: import('zod').ZodError } },
  value: unknown,
  flag: string,
): T {
  const result = schema.safeParse(value);
  if (!result.success) throw new InvalidInputError(`${flag}: ${describeIssues(result.error, '')}`);
  return result.data;
}

export function registerExport(program: Command): void {
  program
    .command('export')
    .description(
      'write training data: LightningRL transitions (reward and advantage per LLM call) or OpenAI fine-tuning chat examples',
    )
    .addOption(storeOption())
    .addOption(
      new Option(
        '--format <format>',
        'transitions: one training sample per LLM call; chat: OpenAI fine-tuning messages',
      )
        .choices(['transitions', 'chat'])
        .default('transitions'),
    )
    .requiredOption('--out <file>', 'the JSON-lines file to write')
    .option('--status <statuses>', 'rollout statuses to include (comma-separated)', 'succeeded,failed,timeout')
    .addOption(new Option('--mode <mode>', 'only this mode').choices(RolloutMode.options))
    .option('--label <label>', 'only this label')
    .option('--dataset <name>', 'only rollouts of this dataset (name or id)')
    .option('--batch <id>', 'only rollouts of this batch')
    .option('--agent <regex>', 'only the LLM calls of agents whose name matches (multi-agent selective training)')
    .option(
      '--policy <name>',
      "only the LLM calls this policy's adapter answered in a GRPO run with several policies (train --policy NAME=REGEX)",
    )
    .option('--min-reward <r>', 'only rollouts whose episode reward is at least r')
    .option('--reward-name <name>', 'the reward dimension used as the episode reward', 'reward')
    .addOption(
      new Option('--missing-reward <policy>', 'rollouts without an episode reward')
        .choices(['exclude', 'fill'])
        .default('exclude'),
    )
    .option('--fill-value <r>', 'the reward given with --missing-reward fill', '0')
    .addOption(
      new Option('--credit <kind>', 'credit assignment: identical (the paper), discounted, step')
        .choices(['identical', 'discounted', 'step'])
        .default('identical'),
    )
    .option('--gamma <γ>', 'discount for --credit discounted', '0.9')
    .addOption(
      new Option('--advantage <kind>', 'grpo (per task group), baseline (minus the mean), none')
        .choices(['grpo', 'baseline', 'none'])
        .default('grpo'),
    )
    .option('--no-std-normalize', 'GRPO advantages as R − mean, without dividing by the std')
    .option(
      '--aggregate',
      'join consecutive calls whose prompt extends the previous prompt + response into one sample (environment tokens masked; needs engine token ids, see run --token-ids)',
    )
    .option(
      '--include-failed',
      'also export calls that were not whole answers (upstream errors, cancelled, truncated), each row flagged with its "outcome"; and, as chat rows, replies cut at their output-token cap, flagged "stoppedAtTokenCap"',
    )
    .action(async (options: ExportOptions) => {
      const statuses = options.status.split(',').map((s) => parsed(RolloutStatus, s.trim(), '--status'));
      let agentMatch: RegExp | undefined;
      try {
        agentMatch = options.agent === undefined ? undefined : new RegExp(options.agent);
      } catch (error) {
        throw new InvalidInputError(`--agent ${options.agent}: not a regular expression (${errorMessage(error)})`);
      }
      const settings = {
        reward: parsed(
          RewardPolicy,
          {
            name: options.rewardName,
            missing: options.missingReward,
            fillValue: number(options.fillValue, '--fill-value'),
          },
          '--reward-name/--missing-reward',
        ),
        credit: parsed(
          CreditOptions,
          options.credit === 'discounted'
            ? { kind: 'discounted', gamma: number(options.gamma, '--gamma') }
            : { kind: options.credit },
          '--credit/--gamma',
        ),
        advantage: parsed(
          AdvantageOptions,
          { kind: options.advantage, normalizeStd: options.stdNormalize },
          '--advantage',
        ),
        agentMatch,
        ...(options.policy === undefined ? {} : { policy: options.policy }),
        minReward: options.minReward === undefined ? undefined : number(options.minReward, '--min-reward'),
        aggregate: options.aggregate ?? false,
        includeFailed: options.includeFailed ?? false,
      };
      const storeFile = resolveStore(options);
      if (!fs.existsSync(storeFile))
        throw new NotFoundError(`no store at ${storeFile}: record rollouts first (lightning run, npm run demo)`);
      assertNotStoreFile(options.out, storeFile);
      const store = Store.open(storeFile, { onUpgrade: (upgrade) => announceUpgrade(storeFile, upgrade) });
      let result;
      try {
        // --dataset takes a name or an id (an unknown one is an error, not an empty file).
        const datasetId = options.dataset === undefined ? undefined : store.listTasks(options.dataset).dataset.id;
        result = buildTransitions(
          store.trajectories({
            status: statuses,
            mode: options.mode,
            label: options.label,
            datasetId,
            batchId: options.batch,
          }),
          settings,
        );
      } finally {
        store.close();
      }
      const lines: string[] = [];
      // Calls with no chat form, by why: the summary says so, never an export that is silently short.
      const notChat: Record<string, number> = {};
      // The store holds no secret it knew of; a row is scrubbed again by value (key shapes, this
      // environment's upstream key), for records made before a secret was known. Nothing else changes.
      registerSecretValue(process.env.LIGHTNING_UPSTREAM_API_KEY);
      const row = (value: Json): string => JSON.stringify(scrubJsonValues(value));
      for (const transition of result.transitions) {
        if (options.format === 'transitions') {
          lines.push(row(Transition.parse(transition)));
          continue;
        }
        const chat = toChatExample(transition, settings.includeFailed);
        // A call kept by --include-failed says so in its row, so a fine-tuning job can still tell.
        if ('example' in chat) {
          lines.push(
            row({
              ...chat.example,
              ...(transition.outcome ? { outcome: transition.outcome } : {}),
              ...(transition.stoppedAtTokenCap ? { stoppedAtTokenCap: true } : {}),
            }),
          );
        } else notChat[chat.reason] = (notChat[chat.reason] ?? 0) + 1;
      }
      const out = path.resolve(options.out);
      writeFileAtomically(out, lines.length ? `${lines.join('\n')}\n` : '');
      const report = ExportReport.parse(result.report);
      // What was left out of training, and why, where a person reads it (stdout is the JSON summary).
      const left = describeSkipped(report.skipped);
      if (left)
        process.stderr.write(`lightning export: ${left} (not whole answers; --include-failed keeps them, flagged)\n`);
      for (const line of leftOutLines(report, notChat, lines.length))
        process.stderr.write(`lightning export: ${line}\n`);
      if (notChat[TOKEN_CAP_REASON])
        process.stderr.write('lightning export: --include-failed keeps replies cut at their token cap, flagged\n');
      const skippedNotChat = Object.values(notChat).reduce((sum, count) => sum + count, 0);
      const summary = {
        event: 'export-finished',
        out,
        format: options.format,
        lines: lines.length,
        skippedNotChat,
        notChat,
        ...report,
      };
      process.stdout.write(`${JSON.stringify(summary)}\n`);
    });
}

/** `--out` must not be the store or its WAL: the export would replace the rollouts it reads. */
function assertNotStoreFile(out: string, storeFile: string): void {
  // Through symbolic links, also for an --out not there yet (its folder's real path): /tmp → /private/tmp on macOS.
  const real = (file: string): string => {
    try {
      return fs.realpathSync(file);
    } catch {
      try {
        return path.join(fs.realpathSync(path.dirname(path.resolve(file))), path.basename(file));
      } catch {
        return path.resolve(file);
      }
    }
  };
  const target = real(out);
  const store = real(storeFile);
  if ([store, `${store}-wal`, `${store}-shm`].includes(target))
    throw new InvalidInputError(`--out ${out} is the store (${storeFile}); name another file to write the rows to`);
}

const plural = (count: number, one: string, many = `${one}s`): string => `${count} ${count === 1 ? one : many}`;

/**
 * What else the export left out, in words for stderr: calls with no chat row (by why), the other
 * choices of n > 1 answers, and why a file is empty — an export never comes out short in silence.
 */
export function leftOutLines(report: ExportReport, notChat: Readonly<Record<string, number>>, lines: number): string[] {
  const out: string[] = [];
  const reasons = Object.entries(notChat);
  if (reasons.length > 0)
    out.push(`no chat row for ${reasons.map(([why, count]) => `${plural(count, 'call')} (${why})`).join('; ')}`);
  if (report.otherChoices > 0) {
    out.push(
      `${plural(report.otherChoices, 'other choice')} of n > 1 answers left out: one row per call, of its first choice`,
    );
  }
  if (report.filledNoReward > 0)
    out.push(
      `${plural(report.filledNoReward, 'rollout')} without an episode reward exported with the --missing-reward fill value`,
    );
  if (lines > 0) return out;
  const why: string[] = [];
  if (report.rollouts === 0) why.push('no rollout matches the filters (--status, --mode, --label, --dataset, --batch)');
  if (report.excludedNoReward > 0) {
    why.push(
      `${plural(report.excludedNoReward, 'rollout')} without an episode reward (--missing-reward fill exports them)`,
    );
  }
  if (report.excludedBelowMinReward > 0)
    why.push(`${plural(report.excludedBelowMinReward, 'rollout')} below --min-reward`);
  if (report.excludedNoCalls > 0) {
    why.push(
      `${plural(report.excludedNoCalls, 'rollout')} with no LLM call to train on (none recorded, none of --agent or --policy, or none a whole answer)`,
    );
  }
  if (reasons.length > 0) why.push('no call has a chat form (see above)');
  out.push(`no rows written: ${why.join('; ') || 'nothing to export'}`);
  return out;
}
