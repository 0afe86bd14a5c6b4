/**
 * **Start Training → Fine-tune on Good Rollouts**: after the base model, the settings of an SFT run in one quick
 * pick — start, or change one at a time (the minimum reward, which dataset's rollouts, epochs, learning rate, the
 * share held out for validation, device; remembered per workspace) — then the run's configuration, checked by the
 * protocol's schema (sftSettings.ts). Starting and following the run is Start Training's (startTraining.ts).
 */
import * as vscode from 'vscode';
import type { ModelSpec, SftConfig } from '../../trainer-daemon/protocol';
import type { DaemonClient } from '../daemonClient';
import { readSettings } from '../settings';
import {
  DEFAULT_SFT_SETTINGS,
  describeSftSettings,
  parseSftSetting,
  SFT_NUMERIC_SETTINGS,
  sftConfig,
  type SftNumericSetting,
  type SftSettings,
} from './sftSettings';
import { pick, pickModel } from './trainingPicks';

const TITLE = 'Lightning: Fine-tune on Good Rollouts';
const MEMORY = 'lightning.sft.settings';

/** Asks for the model and the settings; undefined when the user backs out. */
export async function fineTuneConfig(client: DaemonClient, memory: vscode.Memento): Promise<SftConfig | undefined> {
  const model = await pickModel(memory, `${TITLE} (1/2): base model`, 'fine-tuned with LoRA');
  if (!model) return undefined;
  const settings = await chooseSettings(client, memory, model);
  if (!settings) return undefined;
  const keep = readSettings().keepCheckpoints;
  if (typeof keep === 'object')
    throw new Error(`cannot start training: the lightning.training.keepCheckpoints setting: ${keep.error}`);
  const config = sftConfig({ model, settings, ...(keep === undefined ? {} : { keepCheckpoints: keep }) });
  if (!config.ok) throw new Error(`cannot start training: ${config.message}`);
  return config.value;
}

async function chooseSettings(
  client: DaemonClient,
  memory: vscode.Memento,
  model: ModelSpec,
): Promise<SftSettings | undefined> {
  let settings: SftSettings = { ...DEFAULT_SFT_SETTINGS, ...memory.get<Partial<SftSettings>>(MEMORY) };
  type Choice = 'start' | SftNumericSetting | 'dataset' | 'device';
  for (;;) {
    const current = (key: SftNumericSetting): string =>
      key === 'lr' && settings.lr === null ? 'by the model' : String(settings[key]);
    const choice = await pick<Choice>(
      [
        { label: '$(play) Start fine-tuning', description: describeSftSettings(settings, model), value: 'start' },
        ...(Object.keys(SFT_NUMERIC_SETTINGS) as SftNumericSetting[]).map((key) => ({
          label: SFT_NUMERIC_SETTINGS[key].label,
          description: current(key),
          detail: SFT_NUMERIC_SETTINGS[key].detail,
          value: key,
        })),
        {
          label: 'Rollouts of',
          description: settings.dataset ?? 'any dataset, or none',
          detail: 'only the rated rollouts of one dataset, or all of them',
          value: 'dataset',
        },
        {
          label: 'Device',
          description: settings.device,
          detail: 'auto: the GPU when CUDA is available, else the CPU',
          value: 'device',
        },
      ],
      `${TITLE} (2/2): settings — start, or change one`,
    );
    if (!choice) return undefined;
    if (choice === 'start') {
      await memory.update(MEMORY, settings);
      return settings;
    }
    if (choice === 'dataset') {
      const { items } = await client.request('listDatasets', {});
      const value = await pick<string | null>(
        [
          { label: 'All rated rollouts', description: 'of any dataset, or none (debug runs)', value: null },
          ...items.map((d) => ({ label: d.name, description: `${d.taskCount} tasks`, value: d.name })),
        ],
        `${TITLE}: which rollouts`,
      );
      if (value !== undefined) settings = { ...settings, dataset: value };
    } else if (choice === 'device') {
      const value = await pick<SftSettings['device']>(
        (['auto', 'cpu', 'cuda'] as const).map((device) => ({ label: device, value: device })),
        `${TITLE}: device`,
      );
      if (value) settings = { ...settings, device: value };
    } else {
      const key = choice;
      const text = await vscode.window.showInputBox({
        title: `${TITLE}: ${SFT_NUMERIC_SETTINGS[key].label}`,
        prompt: SFT_NUMERIC_SETTINGS[key].detail,
        value: settings[key] === null ? '' : String(settings[key]),
        ignoreFocusOut: true,
        validateInput: (input) => {
          const parsed = parseSftSetting(key, input);
          return parsed.ok ? undefined : parsed.message;
        },
      });
      const parsed = text === undefined ? undefined : parseSftSetting(key, text);
      if (parsed?.ok) settings = { ...settings, [key]: parsed.value };
    }
  }
}
