/** `lightning checkpoints [--run RUN]`: the saved checkpoints, newest first, with the ids `--checkpoint` takes. */
import type { Command } from 'commander';
import { describeMetrics } from '../../protocol';
import { openBackend } from '../backend';
import { table, time } from '../format';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface CheckpointsOptions extends GlobalOptions {
  run?: string;
}

export function registerCheckpoints(program: Command): void {
  program
    .command('checkpoints')
    .description(
      'list saved checkpoints (newest first) with their key metrics; use one with `lightning run --checkpoint ID` or Lightning: Use Checkpoint',
    )
    .option('--run <id>', 'only this training run')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (options: CheckpointsOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const { items } = await backend.call(
          'listCheckpoints',
          options.run === undefined ? {} : { runId: options.run },
        );
        const newest = [...items].sort((a, b) => b.createdAt - a.createdAt || b.step - a.step);
        if (options.json) process.stdout.write(`${JSON.stringify({ items: newest })}\n`);
        else if (newest.length === 0)
          process.stdout.write(
            'No checkpoints. Training (lightning train --algorithm grpo) saves one per iteration.\n',
          );
        else
          process.stdout.write(
            `${table(
              ['CHECKPOINT', 'RUN', 'STEP', 'METRICS', 'SAVED'],
              newest.map((c) => [c.id, c.runId, String(c.step), describeMetrics(c.metrics) || '-', time(c.createdAt)]),
            )}\n`,
          );
      } finally {
        backend.close();
      }
    });
}
