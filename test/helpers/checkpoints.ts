/**
 * Checkpoints made by the real Python trainer worker (the tiny built-in policy), recorded in a
 * store as a GRPO run's: for the tests of Use Checkpoint, without the minutes a training run takes.
 */
import fs from 'node:fs';
import path from 'node:path';
import { GrpoConfig } from '../../trainer-daemon/protocol';
import { createLogger } from '../../trainer-daemon/log';
import { Store } from '../../trainer-daemon/store/store';
import { TrainerWorker } from '../../trainer-daemon/training/worker';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { parsed } from './params';

const PYTHON = '/usr/bin/python3';
const TINY = { kind: 'tiny' as const, config: { dModel: 32, layers: 1, heads: 2, context: 96 } };

/**
 * A store with one GRPO run and its checkpoints, saved by the real worker (different seeds, so
 * different weights), plus one whose folder is gone.
 */
export async function storeWithCheckpoints(
  cwd: string,
  agent: readonly string[],
): Promise<{ storeFile: string; runId: string; ids: [string, string]; missing: string }> {
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const worker = await TrainerWorker.start({ python: PYTHON, logger: createLogger('test', { level: 'error' }) });
  const dirs = [path.join(cwd, 'ckpt', '1'), path.join(cwd, 'ckpt', '2')];
  try {
    for (const [seed, dir] of dirs.entries()) {
      await worker.request('load', { model: TINY, adapter: { kind: 'full' }, device: 'cpu', threads: 1, seed });
      await worker.request('save', { dir, metrics: { 'reward/mean': seed / 2 } });
    }
  } finally {
    await worker.shutdown();
  }
  const store = Store.open(storeFile);
  try {
    const config = GrpoConfig.parse({
      model: TINY,
      dataset: 'tools',
      device: 'cpu',
      python: PYTHON,
      command: { argv: [...agent], cwd },
    });
    const run = store.recordTrainingRun({ algorithm: 'grpo', config });
    const [a, b, missing] = [
      store.recordTrainingStep(run.id, 1, {}, { dir: dirs[0]!, metrics: { 'reward/mean': 0 } }),
      store.recordTrainingStep(run.id, 2, {}, { dir: dirs[1]!, metrics: { 'reward/mean': 0.5 } }),
      store.recordTrainingStep(run.id, 3, {}, { dir: path.join(cwd, 'ckpt', 'gone'), metrics: {} }),
    ];
    store.importDataset(parsed('importDataset', { name: 'tools', tasks: toolsTasks(2, 0) }));
    return { storeFile, runId: run.id, ids: [a!.id, b!.id], missing: missing!.id };
  } finally {
    store.close();
  }
}
