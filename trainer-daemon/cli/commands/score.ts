/**
 * `lightning score`: scores finished rollouts with the automatic reward sources of a rewards
 * config (rules, reward functions, an LLM judge, an ONNX reward model) through the daemon that owns
 * the store (started here when none runs: the judge's calls go through its proxy). Progress goes to
 * stderr; Ctrl-C asks the daemon to stop after the current chunk, a second Ctrl-C leaves at once.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { ScoreRolloutsResult } from '../../protocol';
import { NotFoundError } from '../../protocol/errors';
import { DEFAULT_REWARDS_FILE, judgeKeys, loadRewardsFile } from '../../rewards/config';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { num, table, truncate } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface ScoreOptions extends GlobalOptions {
  config?: string;
  dataset?: string;
  rollouts?: string[];
  unrated?: boolean;
}

/** Rows shown in text mode; --json has them all. */
const SHOWN = 50;

function render(result: ScoreRolloutsResult): string {
  const rows = result.results
    .slice(0, SHOWN)
    .map((score) => [
      score.rolloutId,
      num(score.value),
      truncate(
        score.sources
          .map((s) =>
            s.kind === 'scored'
              ? `${s.name}=${num(s.value)}`
              : s.kind === 'skipped'
                ? `${s.name}: skipped (${s.reason})`
                : `${s.name}: ERROR ${s.error}`,
          )
          .join('; '),
        160,
      ),
    ]);
  const summary = `Scored ${result.scored} rollout(s); ${result.unscored} without a value; ${result.errors} source error(s)${result.cancelled ? '; cancelled before the end' : ''}.`;
  const more =
    result.results.length > SHOWN ? `… and ${result.results.length - SHOWN} more (--json prints them all)\n` : '';
  return `${rows.length ? `${table(['ROLLOUT', 'REWARD', 'SOURCES'], rows)}\n${more}` : ''}${summary}\n`;
}

export function registerScore(program: Command): void {
  program
    .command('score')
    .description(
      'score finished rollouts with automatic rewards (rules, reward functions, an LLM judge, an ONNX reward model); human annotations are kept and outrank them',
    )
    .addOption(storeOption())
    .addOption(jsonOption())
    .option(
      '--config <file>',
      `the rewards config (default: ${DEFAULT_REWARDS_FILE} beside the store, i.e. .lightning/${DEFAULT_REWARDS_FILE})`,
    )
    .option('--dataset <name>', "only this dataset's rollouts (name or id)")
    .option('--rollouts <ids...>', 'only these rollouts (ids or unique prefixes)')
    .option('--unrated', 'only rollouts without any reward yet')
    .action(async (options: ScoreOptions) => {
      const storeFile = resolveStore(options);
      if (!fs.existsSync(storeFile))
        throw new NotFoundError(`no store at ${storeFile}: start one with \`lightning serve\` or pass --store FILE`);
      const rewardsFile = path.resolve(options.config ?? path.join(path.dirname(storeFile), DEFAULT_REWARDS_FILE));
      const apiKeys = judgeKeys(loadRewardsFile(rewardsFile), process.env);
      const connection = await connectOrStartDaemon(storeFile);
      const jobId = `cli-${process.pid}-${Date.now()}`;
      const progress = connection.client.onNotification('scoreProgress', (p) => {
        if (p.jobId === jobId)
          process.stderr.write(`scored ${p.done}/${p.total}${p.errors ? ` (${p.errors} source errors)` : ''}\n`);
      });
      let interrupts = 0;
      const onSigint = (): void => {
        interrupts += 1;
        if (interrupts > 1) process.exit(130);
        process.stderr.write('lightning: cancelling after the current chunk (Ctrl-C again to leave now)\n');
        void connection.client.request('cancelScore', { jobId }).catch(() => undefined);
      };
      process.on('SIGINT', onSigint);
      try {
        const result = await connection.client.request('scoreRollouts', {
          rewardsFile,
          dataset: options.dataset,
          rollouts: options.rollouts,
          unrated: options.unrated ?? false,
          jobId,
          apiKeys,
        });
        process.stdout.write(options.json ? `${JSON.stringify(result)}\n` : render(result));
        if (result.cancelled) process.exitCode = 130;
      } finally {
        process.off('SIGINT', onSigint);
        progress.dispose();
        await connection.close();
      }
    });
}
