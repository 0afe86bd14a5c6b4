/**
 * The panel's data-side requests: the Datasets section (every dataset with its tasks per split),
 * the Training view of a rollout (`transitions/forRollout`, with the export's default options), and
 * the review of automatic rewards (accept / correct / reject, rewards/reviewReward.ts).
 */
import type { DatasetRow } from '../../trainer-daemon/protocol/ui/panelMessages';
import type { RolloutTransitions } from '../../trainer-daemon/protocol';
import type { DaemonSupervisor } from '../supervisor';

export async function datasetRows(supervisor: DaemonSupervisor): Promise<DatasetRow[]> {
  const client = await supervisor.ensureRunning();
  const { items } = await client.request('listDatasets', {});
  return Promise.all(
    items.map(async (dataset) => {
      const splits = { train: 0, val: 0, test: 0 };
      for (const task of (await client.request('listTasks', { dataset: dataset.id })).items) splits[task.split] += 1;
      return { dataset, splits };
    }),
  );
}

export async function rolloutTransitions(supervisor: DaemonSupervisor, rolloutId: string): Promise<RolloutTransitions> {
  const client = await supervisor.ensureRunning();
  return client.request('rolloutTransitions', { rolloutId });
}
