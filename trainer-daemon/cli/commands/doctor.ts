/** `lightning doctor [--json] [--setup [--hf] [--apt]]`: the trainer's environment, and Set Up Trainer. */
import type { Command } from 'commander';
import { InvalidInputError } from '../../protocol/errors';
import { diagnosisReady, renderDiagnosis } from '../../protocol/doctorText';
import { diagnose, setUpTrainer } from '../../training/doctor';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface DoctorOptions extends GlobalOptions {
  setup?: boolean;
  hf?: boolean;
  apt?: boolean;
  python?: string;
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
      if (options.apt && !options.setup)
        throw new InvalidInputError('--apt applies with --setup only: lightning doctor --setup --apt');
      const storeFile = resolveStore(options);
      const say = (line: string): void => void process.stderr.write(`${line}\n`);
      const result = options.setup
        ? await setUpTrainer(storeFile, { hf: options.hf ?? false, apt: options.apt ?? false, say })
        : await diagnose(storeFile, options.python, { hf: options.hf });
      if (options.json) process.stdout.write(`${JSON.stringify(result)}\n`);
      else process.stdout.write(`${renderDiagnosis(result)}\n`);
      if (!diagnosisReady(result)) process.exitCode = 1;
    });
}
