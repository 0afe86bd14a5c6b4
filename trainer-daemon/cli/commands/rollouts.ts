/** `lightning rollouts`: the rollout list, newest first, with the panel's filters. */
import { Option, type Command } from 'commander';
import { RolloutMode, RolloutStatus, type ListRolloutsParams } from '../../protocol';
import { InvalidInputError } from '../../protocol/errors';
import { openBackend } from '../backend';
import { duration, num, table, time, truncate } from '../textTable';
import { rolloutDuration } from '../../protocol/format';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface RolloutsOptions extends GlobalOptions {
  status?: string[];
  mode?: string;
  label?: string;
  task?: string;
  search?: string;
  unrated?: boolean;
  oldest?: boolean;
  limit: string;
  cursor?: string;
}

function parseStatuses(values: string[] | undefined): ListRolloutsParams['status'] {
  if (!values) return undefined;
  return values
    .flatMap((value) => value.split(','))
    .map((status) => {
      const parsed = RolloutStatus.safeParse(status);
      if (!parsed.success)
        throw new InvalidInputError(`--status ${status}: expected one of ${RolloutStatus.options.join(', ')}`);
      return parsed.data;
    });
}

export function registerRollouts(program: Command): void {
  program
    .command('rollouts')
    .description('list rollouts, newest first')
    .addOption(storeOption())
    .addOption(jsonOption())
    .option(
      '--status <status...>',
      `only these statuses (${RolloutStatus.options.join(', ')}); repeat or comma-separate`,
    )
    .addOption(new Option('--mode <mode>', 'only this mode').choices(RolloutMode.options))
    .option('--label <label>', 'only this exact label')
    .option('--task <id>', 'only this task id')
    .option('--search <text>', 'text search in label and task')
    .option('--unrated', 'only rollouts without any reward')
    .option('--oldest', 'oldest first')
    .option('--limit <n>', 'rollouts per page (1..500)', '50')
    .option('--cursor <cursor>', 'continue after a previous page (its nextCursor)')
    .action(async (options: RolloutsOptions) => {
      const limit = Number(options.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 500)
        throw new InvalidInputError(`--limit ${options.limit}: expected an integer 1..500`);
      const backend = await openBackend(resolveStore(options));
      try {
        const page = await backend.call('listRollouts', {
          status: parseStatuses(options.status),
          mode: options.mode as ListRolloutsParams['mode'],
          label: options.label,
          taskId: options.task,
          search: options.search,
          unrated: options.unrated,
          order: options.oldest ? 'oldest' : 'newest',
          limit,
          cursor: options.cursor,
        });
        if (options.json) {
          process.stdout.write(`${JSON.stringify(page)}\n`);
          return;
        }
        if (page.items.length === 0) {
          process.stdout.write('No rollouts match.\n');
          return;
        }
        const rows = page.items.map((r) => [
          r.id,
          r.status,
          r.mode,
          truncate(r.label ?? r.task?.id ?? '-', 32),
          num(r.reward),
          String(r.llmCalls),
          String(r.promptTokens + r.completionTokens),
          duration(rolloutDuration(r)),
          time(r.createdAt),
        ]);
        process.stdout.write(
          `${table(['ID', 'STATUS', 'MODE', 'LABEL', 'REWARD', 'LLM', 'TOKENS', 'DURATION', 'CREATED'], rows)}\n`,
        );
        if (page.nextCursor) process.stdout.write(`More: --cursor ${page.nextCursor}\n`);
      } finally {
        backend.close();
      }
    });
}
