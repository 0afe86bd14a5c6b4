/** `lightning reward ID VALUE`: append a human reward (annotations are never overwritten). */
import type { Command } from 'commander';
import { InvalidInputError } from '../../protocol/errors';
import { openBackend } from '../backend';
import { num } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface RewardOptions extends GlobalOptions {
  name: string;
  comment?: string;
  span?: string;
  author?: string;
}

export function registerReward(program: Command): void {
  program
    .command('reward')
    .description('annotate a rollout (or one of its steps with --span) with a reward; a correction is a new annotation')
    .argument('<id>', 'rollout id (or a unique prefix of at least 4 characters)')
    .argument('<value>', 'the reward, a number (👍 = 1, 👎 = 0)')
    .addOption(storeOption())
    .addOption(jsonOption())
    .option('--name <name>', 'reward dimension', 'reward')
    .option('--comment <text>', 'why')
    .option('--span <spanId>', 'annotate one step: the span id of an LLM call (see `lightning show`)')
    .option('--author <name>', 'who annotated (default: $USER)')
    .action(async (id: string, value: string, options: RewardOptions) => {
      // A decimal number, as a person types one: not hex (0x10 would be 16), not 1e309 (infinite).
      const number = /^\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i.test(value) ? Number(value) : Number.NaN;
      if (!Number.isFinite(number))
        throw new InvalidInputError(
          `reward value ${JSON.stringify(value)} is not a finite decimal number (e.g. 1, 0, 0.5, -1)`,
        );
      const backend = await openBackend(resolveStore(options));
      try {
        const reward = await backend.call('addReward', {
          rolloutId: id,
          value: number,
          name: options.name,
          comment: options.comment ?? null,
          spanId: options.span ?? null,
          source: 'human',
          author: options.author ?? process.env.USER ?? null,
        });
        process.stdout.write(
          options.json
            ? `${JSON.stringify(reward)}\n`
            : `Recorded ${reward.name} = ${num(reward.value)} on ${reward.rolloutId}${reward.spanId ? ` step ${reward.spanId}` : ''} (reward #${reward.id}).\n`,
        );
      } finally {
        backend.close();
      }
    });
}
