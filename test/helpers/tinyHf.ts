/**
 * A tiny Hugging Face model for tests and benches, built from its config (no download): a Qwen2 of two layers with a
 * byte-level tokenizer and chat template (lightning_trainer.bench.tiny_hf_model_dir), its random weights written by
 * save_pretrained as a downloaded model's are, so that a PEFT export names this folder as its base.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT } from './daemon';

/** The test venv's Python (transformers + peft) from LIGHTNING_TEST_PYTHON; throws naming the fix when it is unset. */
export function venvPython(): string {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  if (!python)
    throw new Error('LIGHTNING_TEST_PYTHON is unset: point it at a Python with requirements-test.txt installed');
  return python;
}

/** Writes the tiny Qwen2 (seeded: the same weights each time) into `folder` with `python`'s transformers. */
export function saveTinyQwen(python: string, folder: string): void {
  execFileSync(
    python,
    [
      '-c',
      [
        'import sys, torch, transformers',
        'from pathlib import Path',
        'from lightning_trainer.bench import tiny_hf_model_dir',
        'folder = tiny_hf_model_dir(Path(sys.argv[1]))',
        'torch.manual_seed(0)',
        'transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder)).save_pretrained(folder)',
      ].join('\n'),
      folder,
    ],
    {
      stdio: 'pipe',
      timeout: 300_000,
      env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'trainer-daemon', 'python') },
    },
  );
}
