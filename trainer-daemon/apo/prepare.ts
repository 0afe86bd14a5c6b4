/**
 * What an APO run is checked for before it is recorded (`training/start` refuses it, naming the field, with nothing
 * written): the prompt template resource (or the prompt file that seeds it), training and validation tasks, a rollout
 * budget that can score the seed, and its scoring. Then a prompt file seeds the resource: a new current version when
 * its text differs.
 */
import fs from 'node:fs';
import type { ApoConfig, Task } from '../protocol';
import { errorMessage, InvalidInputError, NotFoundError } from '../protocol/errors';
import type { RolloutScoring } from '../runner/pool';
import type { ApoStore } from './context';
import type { EvalTask } from './evaluate';
import { apoScoring } from './reward';

/** What a checked APO run starts with. */
export interface ApoPlan {
  readonly train: readonly EvalTask[];
  readonly val: readonly EvalTask[];
  readonly scoring: RolloutScoring | undefined;
}

/** A dataset's tasks of one split; training takes all of a dataset that has no train split, validation --val's too. */
function loadTasks(
  store: ApoStore,
  dataset: string,
  split: Task['split'],
  field: 'dataset' | 'valDataset',
): EvalTask[] {
  const all = store.tasks(dataset).items;
  const chosen = all.some((task) => task.split === split)
    ? all.filter((task) => task.split === split)
    : split === 'train' || field === 'valDataset'
      ? all
      : [];
  if (chosen.length === 0)
    throw new InvalidInputError(
      `params.config.${field}: dataset ${dataset} has no ${split} tasks; give validation tasks with valDataset (--val DATASET)`,
    );
  return chosen.map((task) => ({ id: task.id, datasetId: task.datasetId, input: task.input, expected: task.expected }));
}

function readPromptFile(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new NotFoundError(`params.config.promptFile: cannot read ${file}: ${errorMessage(error)}`);
  }
}

export async function prepareApo(
  store: ApoStore,
  config: ApoConfig,
  storeFile: string,
  env: NodeJS.ProcessEnv,
): Promise<ApoPlan> {
  let scoring: RolloutScoring | undefined;
  try {
    scoring = apoScoring(config, storeFile, env);
  } catch (error) {
    throw new InvalidInputError(`params.config.rewardsFile: ${errorMessage(error)}`);
  }
  const fromFile = config.promptFile === null ? null : readPromptFile(config.promptFile);
  const existing = fromFile !== null && !store.hasResource(config.resource) ? null : store.resource(config.resource);
  if (existing && (existing.kind !== 'prompt_template' || typeof existing.value !== 'string'))
    throw new InvalidInputError(
      `params.config.resource: ${config.resource} is a ${existing.kind} resource; APO optimizes prompt templates`,
    );
  const train = loadTasks(store, config.dataset, 'train', 'dataset');
  const val = config.valDataset
    ? loadTasks(store, config.valDataset, 'val', 'valDataset')
    : loadTasks(store, config.dataset, 'val', 'dataset');
  if (config.budgetRollouts < val.length)
    throw new InvalidInputError(
      `params.config.budgetRollouts: ${config.budgetRollouts} cannot even score the seed on the ${val.length} validation tasks`,
    );
  // The prompt file is the seed: its text becomes the resource's current version unless it already is.
  if (fromFile !== null && existing?.value !== fromFile)
    await store.putPrompt(config.resource, fromFile, { current: true });
  return { train, val, scoring };
}
