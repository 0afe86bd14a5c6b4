/**
 * `lightning checkpoints [--run RUN]`: the saved checkpoints, newest first, with the ids `--checkpoint` takes, each
 * one's size on disk (and whether it keeps optimizer state) and each run's total; `checkpoints export ID --format
 * peft|hf|merged --out DIR` writes one in a standard format; `checkpoints delete ID` deletes one.
 */
import path from 'node:path';
import { Option, type Command } from 'commander';
import { describeMetrics, type Checkpoint } from '../../protocol';
import { checkpointSize, checkpointsTotal, formatBytes } from '../../protocol/format';
import { openBackend } from '../backend';
import { table, time } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface CheckpointsOptions extends GlobalOptions {
  run?: string;
}

interface ExportOptions extends GlobalOptions {
  format: 'peft' | 'hf' | 'merged';
  out: string;
  python?: string;
  set?: boolean;
}

/** One line per run: how many checkpoints and how much disk they take. */
function totals(items: readonly Checkpoint[]): string {
  const runs = new Map<string, Checkpoint[]>();
  for (const c of items) {
    const run = runs.get(c.runId);
    if (run) run.push(c);
    else runs.set(c.runId, [c]);
  }
  return [...runs].map(([runId, checkpoints]) => `run ${runId}: ${checkpointsTotal(checkpoints)}`).join('\n');
}

async function list(options: CheckpointsOptions): Promise<void> {
  const backend = await openBackend(resolveStore(options));
  try {
    const { items } = await backend.call('listCheckpoints', options.run === undefined ? {} : { runId: options.run });
    const newest = [...items].sort((a, b) => b.createdAt - a.createdAt || b.step - a.step);
    if (options.json) process.stdout.write(`${JSON.stringify({ items: newest })}\n`);
    else if (newest.length === 0)
      process.stdout.write('No checkpoints. Training (lightning train --algorithm grpo) saves one per iteration.\n');
    else {
      const rows = newest.map((c) => [
        c.id,
        c.runId,
        String(c.step),
        describeMetrics(c.metrics) || '-',
        checkpointSize(c),
        time(c.createdAt),
      ]);
      process.stdout.write(
        `${table(['CHECKPOINT', 'RUN', 'STEP', 'METRICS', 'SIZE', 'SAVED'], rows)}\n\n${totals(newest)}\n`,
      );
    }
  } finally {
    backend.close();
  }
}

export function registerCheckpoints(program: Command): void {
  const checkpoints = program
    .command('checkpoints')
    .description(
      'list saved checkpoints (newest first) with their key metrics and sizes; use one with `lightning run --checkpoint ID` or Lightning: Use Checkpoint; export or delete one',
    )
    .option('--run <id>', 'only this training run')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action((options: CheckpointsOptions) => list(options));

  checkpoints
    .command('export')
    .description(
      'write a checkpoint as a PEFT adapter (peft: PeftModel.from_pretrained(base, DIR)) or a Hugging Face model folder (hf, merged: AutoModelForCausalLM.from_pretrained(DIR); LoRA merged into its base); docs/training.md shows how to serve it with vLLM, llama.cpp or Ollama',
    )
    .argument('<id>', 'a checkpoint id (lightning checkpoints)')
    .addOption(
      new Option('--format <format>', 'peft: the LoRA adapter; hf: the whole model; merged: LoRA merged into the base')
        .choices(['peft', 'hf', 'merged'])
        .makeOptionMandatory(),
    )
    .requiredOption('--out <dir>', 'the folder to write (new or empty)')
    .option(
      '--python <path>',
      'the Python that runs the export (needs transformers + peft; default: the training run’s)',
    )
    .option(
      '--set',
      "a run with several policies (--policy): every policy's checkpoint of this one's step as one PEFT folder, an adapter each (--format peft)",
    )
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (id: string, options: ExportOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const out = path.resolve(options.out);
        const written = await backend.call('exportCheckpoint', {
          id,
          format: options.format,
          out,
          ...(options.python ? { python: options.python } : {}),
          ...(options.set ? { set: true } : {}),
        });
        if (options.json) process.stdout.write(`${JSON.stringify(written)}\n`);
        else {
          const onto = written.baseModel ? ` (an adapter for ${written.baseModel})` : '';
          process.stdout.write(
            `Exported ${id} as ${written.format}${onto} to ${written.path}: ${written.files.length} files, ${formatBytes(written.bytes)}, ${written.seconds.toFixed(1)} s\n`,
          );
        }
      } finally {
        backend.close();
      }
    });

  checkpoints
    .command('delete')
    .description(
      'delete a checkpoint (its folder and record); not the one served now or the one a running run continues from',
    )
    .argument('<id>', 'a checkpoint id (lightning checkpoints)')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (id: string, options: GlobalOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const deleted = await backend.call('deleteCheckpoint', { id });
        if (options.json) process.stdout.write(`${JSON.stringify(deleted)}\n`);
        else process.stdout.write(`Deleted ${deleted.deleted} (${formatBytes(deleted.bytes)} freed)\n`);
      } finally {
        backend.close();
      }
    });
}
