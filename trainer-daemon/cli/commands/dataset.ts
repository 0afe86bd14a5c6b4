/** `lightning dataset import|list`: datasets of tasks for batch rollouts and training. */
import path from 'node:path';
import type { Command } from 'commander';
import { errorMessage, InvalidInputError, NotFoundError } from '../../protocol/errors';
import { parseTasksJsonl, readDatasetFile } from '../../datasets/parse';
import { openBackend } from '../backend';
import { registerDatasetRun } from './datasetRun';
import { table, time } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface ImportOptions extends GlobalOptions {
  name?: string;
  expectedField: string;
  valFraction: string;
}

export function registerDataset(program: Command): void {
  const dataset = program.command('dataset').description('datasets of tasks (tasks.jsonl: one JSON object per line)');
  dataset
    .command('import')
    .description(
      'import tasks.jsonl: an optional "id", an optional expected answer, an optional "split" (train|val|test), any input fields',
    )
    .argument('<file>', 'the JSON-lines file')
    .addOption(storeOption())
    .addOption(jsonOption())
    .option('--name <name>', 'dataset name (default: the file name without extension)')
    .option(
      '--expected-field <field>',
      'the field holding the expected answer (kept out of the agent input)',
      'expected',
    )
    .option('--val-fraction <f>', 'fraction of tasks without a split that go to validation (stable by id)', '0')
    .action(async (file: string, options: ImportOptions) => {
      const valFraction = Number(options.valFraction);
      if (!Number.isFinite(valFraction) || valFraction < 0 || valFraction > 1)
        throw new InvalidInputError(`--val-fraction ${options.valFraction}: expected a number from 0 to 1`);
      let text: string;
      try {
        text = readDatasetFile(file);
      } catch (error) {
        if (error instanceof InvalidInputError) throw new InvalidInputError(`${file}: ${errorMessage(error)}`);
        throw new NotFoundError(`cannot read ${file}: ${errorMessage(error)}`);
      }
      const tasks = (() => {
        try {
          return parseTasksJsonl(text, { expectedField: options.expectedField, valFraction });
        } catch (error) {
          throw new InvalidInputError(`${file}: ${errorMessage(error)}`);
        }
      })();
      const backend = await openBackend(resolveStore(options), { create: true });
      try {
        const created = await backend.call('importDataset', {
          name: options.name ?? path.basename(file).replace(/\.[^.]+$/, ''),
          source: path.resolve(file),
          tasks,
        });
        const splits = tasks.reduce<Record<string, number>>(
          (counts, task) => ({ ...counts, [task.split]: (counts[task.split] ?? 0) + 1 }),
          {},
        );
        process.stdout.write(
          options.json
            ? `${JSON.stringify(created)}\n`
            : `Imported ${created.taskCount} tasks as dataset ${created.name} (${created.id}): ${Object.entries(splits)
                .map(([split, n]) => `${n} ${split}`)
                .join(', ')}.\n`,
        );
      } finally {
        backend.close();
      }
    });
  registerDatasetRun(dataset);
  dataset
    .command('list')
    .description('list datasets')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (options: GlobalOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const { items } = await backend.call('listDatasets', {});
        if (options.json) process.stdout.write(`${JSON.stringify({ items })}\n`);
        else if (items.length === 0)
          process.stdout.write('No datasets. Import one with `lightning dataset import tasks.jsonl`.\n');
        else
          process.stdout.write(
            `${table(
              ['ID', 'NAME', 'TASKS', 'CREATED', 'SOURCE'],
              items.map((d) => [d.id, d.name, String(d.taskCount), time(d.createdAt), d.source ?? '-']),
            )}\n`,
          );
      } finally {
        backend.close();
      }
    });
}
