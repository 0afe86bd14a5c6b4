/** `lightning doctor [--json] [--setup [--hf] [--apt]]`: the trainer's environment, and Set Up Trainer. */
import type { Command } from 'commander';
import { diagnose, setUpTrainer, type Diagnosis } from '../../training/doctor';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface DoctorOptions extends GlobalOptions {
  setup?: boolean;
  hf?: boolean;
  apt?: boolean;
  python?: string;
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

function render(d: Diagnosis): string {
  const lines: string[] = [];
  const r = d.report;
  lines.push(
    `Python        ${d.chosen ? `${d.chosen.executable} (${d.chosen.origin}) ${d.chosen.version}` : 'none with PyTorch'}`,
  );
  lines.push(`torch         ${r?.torch ?? d.chosen?.torch ?? 'missing'}${r?.blas ? ` (BLAS: ${r.blas})` : ''}`);
  lines.push(`device        ${r?.device ?? '-'}`);
  lines.push(
    `GPU           ${r?.cuda ? `${r.cuda.name}, ${gib(r.cuda.memoryFreeBytes)} free of ${gib(r.cuda.memoryTotalBytes)}` : 'none'}`,
  );
  lines.push(`transformers  ${r?.transformers ?? 'missing'}`);
  lines.push(`peft          ${r?.peft ?? 'missing'}`);
  if (r) lines.push(`pip index     ${r.pipReachesIndex ? 'reachable' : 'not reachable'}`);
  if (!d.chosen) for (const c of d.candidates) lines.push(`  tried ${c.executable} (${c.origin}): ${c.problem}`);
  const list = (title: string, problems: Diagnosis['problems']): void => {
    if (problems.length === 0) return;
    lines.push('', title);
    for (const p of problems) lines.push(`  ${p.problem}\n    → ${p.fix}`);
  };
  list(
    'To fix:',
    d.problems.filter((p) => !p.optional),
  );
  list(
    'Optional (only some features need these):',
    d.problems.filter((p) => p.optional),
  );
  lines.push(
    '',
    d.chosen && d.problems.every((p) => p.optional) ? 'The trainer is ready.' : 'The trainer is not ready.',
  );
  return lines.join('\n');
}

export function registerDoctor(program: Command): void {
  program
    .command('doctor')
    .description(
      "check the trainer's Python environment (Python, torch, CUDA, GPU memory, transformers, peft) and say how to fix what is missing",
    )
    .addOption(storeOption())
    .addOption(jsonOption())
    .option(
      '--setup',
      'create or repair the trainer environment: a venv at .lightning/venv, pip install torch (Set Up Trainer)',
    )
    .option('--hf', 'with --setup: also install transformers and peft (Hugging Face models)')
    .option('--apt', "with --setup, as root: install Debian's python3-torch when pip cannot reach an index")
    .option('--python <path>', 'check this Python')
    .action(async (options: DoctorOptions) => {
      const storeFile = resolveStore(options);
      const say = (line: string): void => void process.stderr.write(`${line}\n`);
      const result = options.setup
        ? await setUpTrainer(storeFile, { hf: options.hf ?? false, apt: options.apt ?? false, say })
        : await diagnose(storeFile, options.python, { hf: options.hf });
      if (options.json) process.stdout.write(`${JSON.stringify(result)}\n`);
      else process.stdout.write(`${render(result)}\n`);
      if (!result.chosen || result.problems.some((p) => !p.optional)) process.exitCode = 1;
    });
}
