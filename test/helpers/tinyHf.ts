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

/**
 * Writes the tiny Qwen2 (seeded: the same weights each time; `seed` picks other ones) into `folder` with `python`'s
 * transformers. `initializerRange` overrides Qwen2's weight init std (0.02), e.g. for a model that must learn: at 0.02
 * the frozen output layer's logits span a fraction of a nat whatever the hidden state, so no LoRA adapter can make
 * any reply likely (the entropy stays at ln |vocab|).
 */
export function saveTinyQwen(
  python: string,
  folder: string,
  options: { readonly seed?: number; readonly initializerRange?: number } = {},
): void {
  execFileSync(
    python,
    [
      '-c',
      [
        'import sys, json, torch, transformers',
        'from pathlib import Path',
        'from lightning_trainer.bench import tiny_hf_model_dir',
        'folder = tiny_hf_model_dir(Path(sys.argv[1]))',
        'options = json.loads(sys.argv[2])',
        "torch.manual_seed(options.get('seed', 0))",
        'config = transformers.AutoConfig.from_pretrained(folder)',
        "if 'initializerRange' in options: config.initializer_range = options['initializerRange']",
        'transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)',
      ].join('\n'),
      folder,
      JSON.stringify(options),
    ],
    {
      stdio: 'pipe',
      timeout: 300_000,
      env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'trainer-daemon', 'python') },
    },
  );
}
