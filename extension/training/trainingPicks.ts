/**
 * The quick picks every kind of training asks with: a plain pick of values, and the base model (the tiny built-in
 * policy, the `lightning.trainingModel` setting, the one used last, or a Hugging Face name or local folder typed in;
 * remembered per workspace), shared by Start Training's GRPO and Fine-tune on Good Rollouts.
 */
import * as vscode from 'vscode';
import type { ModelSpec } from '../../trainer-daemon/protocol';
import { readSettings } from '../settings';
import { modelSpec } from './grpoSettings';

export type PickItem<T> = vscode.QuickPickItem & { readonly value: T };

/** The workspace memory key of the model picked last (both kinds of training share it). */
const MODEL_MEMORY = 'lightning.grpo.model';

export async function pick<T>(items: readonly PickItem<T>[], title: string): Promise<T | undefined> {
  return (await vscode.window.showQuickPick(items, { title, ignoreFocusOut: true, matchOnDescription: true }))?.value;
}

/** The base model to train; `title` is the quick pick's (with its step), `trained` how it trains a Hugging Face one. */
export async function pickModel(
  memory: vscode.Memento,
  title: string,
  trained = 'trained with LoRA',
): Promise<ModelSpec | undefined> {
  const configured = readSettings().trainingModel;
  const last = memory.get<string>(MODEL_MEMORY);
  const names = [...new Set([configured, last].filter((name): name is string => !!name && name !== 'tiny'))];
  const choice = await pick<string | null>(
    [
      {
        label: 'tiny',
        description: 'the built-in small GPT (byte-level): no download, fine on a CPU',
        value: 'tiny',
      },
      ...names.map((name) => ({
        label: name,
        description: name === configured ? 'the lightning.trainingModel setting' : 'used last time',
        value: name,
      })),
      {
        label: '$(edit) Hugging Face model…',
        description: 'a hub name or a local folder (needs transformers + peft: Set Up Trainer)',
        value: null,
      },
    ],
    title,
  );
  if (choice === undefined) return undefined;
  const name =
    choice ??
    (await vscode.window.showInputBox({
      title: `${title.replace(/ \(\d\/\d\).*$/, '')}: Hugging Face model`,
      prompt: `A hub name (e.g. Qwen/Qwen2.5-0.5B-Instruct) or a local model folder; ${trained}`,
      value: last ?? 'Qwen/Qwen2.5-0.5B-Instruct',
      ignoreFocusOut: true,
      validateInput: (text) => {
        const spec = modelSpec(text);
        return spec.ok ? undefined : spec.message;
      },
    }));
  if (name === undefined) return undefined;
  const spec = modelSpec(name);
  if (!spec.ok) throw new Error(spec.message);
  await memory.update(MODEL_MEMORY, name.trim());
  return spec.value;
}
