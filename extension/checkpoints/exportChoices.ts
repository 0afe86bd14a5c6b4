/**
 * Pure parts of **Lightning: Export Checkpoint…**, free of `vscode` so they are unit-tested: the formats offered for
 * a checkpoint (its adapter kind decides which make sense) and the folder an export goes to inside the one picked.
 */
import path from 'node:path';
import type { Checkpoint, CheckpointFormat } from '../../trainer-daemon/protocol';
import { checkpointPolicyName } from '../../trainer-daemon/protocol/policyCheckpoint';

export interface FormatItem {
  readonly label: string;
  readonly description: string;
  readonly detail: string;
  readonly format: CheckpointFormat;
}

const FORMATS: Record<CheckpointFormat, Omit<FormatItem, 'format'>> = {
  peft: {
    label: 'PEFT adapter',
    description: 'peft',
    detail: 'The LoRA adapter alone: PeftModel.from_pretrained(base, DIR); vLLM serves it with --enable-lora',
  },
  merged: {
    label: 'Merged model',
    description: 'merged',
    detail: 'LoRA merged into its base: a save_pretrained folder AutoModelForCausalLM.from_pretrained(DIR) loads',
  },
  hf: {
    label: 'Hugging Face model',
    description: 'hf',
    detail: 'The whole model as a save_pretrained folder (safetensors, config, tokenizer, chat template)',
  },
};

/** The formats to offer: LoRA runs get the adapter and the merged model; full fine-tunes the model folder. */
export function formatItems(adapterKind: 'lora' | 'full'): FormatItem[] {
  const formats: CheckpointFormat[] = adapterKind === 'lora' ? ['peft', 'merged'] : ['hf'];
  return formats.map((format) => ({ ...FORMATS[format], format }));
}

/** Inside the folder the person picked: `<run>-step<N>-<format>`, numbered when that name is taken. */
export function exportFolder(
  parent: string,
  checkpoint: Pick<Checkpoint, 'runId' | 'step'> & { readonly path?: string },
  format: CheckpointFormat,
  exists: (dir: string) => boolean,
): string {
  // A policy's checkpoint (several policies in the run) carries its name: two policies of a step, two folders.
  const policy =
    checkpoint.path === undefined ? null : checkpointPolicyName({ path: checkpoint.path, step: checkpoint.step });
  const base = path.join(parent, `${checkpoint.runId}-step${checkpoint.step}${policy ? `-${policy}` : ''}-${format}`);
  let candidate = base;
  for (let n = 2; exists(candidate); n += 1) candidate = `${base}-${n}`;
  return candidate;
}
