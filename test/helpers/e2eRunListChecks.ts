/**
 * Steps of editor.test.ts's session that check the panel's list of runs once the session has made its rollouts and
 * its APO run: the list grouped by run (own runs first, the APO run one collapsed row with its batches inside, one
 * count with the status bar), and past the newest 100 runs, the last row that counts the runs left out and shows
 * them. Each takes the session as the tests before it left it.
 */
import assert from 'node:assert/strict';
import type { FrameLocator, Page } from 'playwright-core';
import type { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { rolloutCount } from '../../trainer-daemon/protocol/format';
import {
  moreRunsText,
  rolloutTitle,
  runGroupFacts,
  runGroupTime,
  runGroupTitle,
} from '../../trainer-daemon/protocol/ui/rolloutText';
import { countShown, runCommand } from './codeServer';
import { waitFor } from './tmp';

/** The session's page, its Lightning panel, an RPC client of its daemon, and where screenshots go. */
export interface RunListSession {
  readonly page: Page;
  readonly panel: FrameLocator;
  readonly client: RpcClient;
  readonly shot: (name: string) => Promise<unknown>;
}

/**
 * Own runs first; the APO run one collapsed row named by its label, its batches inside; one count with the status
 * bar.
 */
export async function checkRunsGrouped({ page, panel, client, shot }: RunListSession): Promise<void> {
  await runCommand(page, 'Lightning: Show Panel');
  const counted = await client.request('rolloutGroups', {});
  const apo = counted.runs.find((run) => run.kind === 'training' && run.algorithm === 'apo');
  assert.ok(apo?.kind === 'training', `the APO run is one group (${JSON.stringify(counted.runs.map((r) => r.kind))})`);
  assert.ok(apo.batches.length >= 2, "the APO run's evaluations and its optimizer calls, inside it");
  assert.equal(counted.runs.length, 1, 'one run: its batches are not rows of their own');
  assert.equal(counted.ungrouped, 4, 'two debug sessions, the big rollout, the latency probe');
  await countShown(page, counted.total);
  const runRow = panel.locator(`.group-row.group-run[data-run-id="${apo.runId}"]`);
  await runRow.waitFor({ timeout: 15_000 });
  assert.equal(await runRow.locator('.title').textContent(), runGroupTitle(apo));
  assert.ok(!(await runRow.locator('.title').textContent())!.includes(apo.runId), 'a label, not the id');
  assert.equal(await runRow.locator('.group-facts').textContent(), runGroupFacts(apo));
  assert.equal(await runRow.locator('.time').textContent(), runGroupTime(apo), 'when it started');
  assert.equal(await panel.locator('.group-row.group-batch').count(), 0, 'its batches collapsed inside it');
  assert.equal(await panel.locator('.rollout-row.nested').count(), 0, 'collapsed');
  // Own runs above every group (rows are placed by their `top`).
  const tops = async (selector: string): Promise<number[]> =>
    panel
      .locator(selector)
      .evaluateAll((rows) =>
        rows.map((row) => Number.parseFloat((row as unknown as { style: { top: string } }).style.top)),
      );
  assert.ok(
    Math.max(...(await tops('.rollout-row:not(.nested)'))) < Math.min(...(await tops('.group-row'))),
    'own runs first',
  );

  // Expanded, the run shows its batches, collapsed: the optimizer's calls and each evaluation, by what they were.
  await runRow.click();
  const batchRows = panel.locator('.group-row.group-batch');
  await waitFor(async () => (await batchRows.count()) === apo.batches.length, 'the run’s batches', 15_000);
  const optimizer = apo.batches.find((batch) => batch.mode === 'optimizer')!;
  await panel
    .locator(`.group-row.group-batch[data-batch-id="${optimizer.batchId}"]`, { hasText: 'Optimizer calls' })
    .waitFor({ timeout: 5_000 });
  assert.equal(await panel.locator('.rollout-row.nested').count(), 0, 'the batches collapsed');

  // An evaluation expanded lists its rollouts beneath it, titled by their task.
  const evaluation = apo.batches.find((batch) => batch.step !== null)!;
  const header = panel.locator(`.group-row.group-batch[data-batch-id="${evaluation.batchId}"]`);
  await header.filter({ hasText: `Evaluation ${evaluation.step}` }).waitFor({ timeout: 5_000 });
  await header.filter({ hasText: rolloutCount(evaluation.count) }).waitFor({ timeout: 5_000 });
  await header.click();
  const [first] = (await client.request('listRollouts', { batchId: evaluation.batchId, limit: 1 })).items;
  const nested = panel.locator(`.rollout-row.nested.depth-2[data-rollout-id="${first!.id}"]`);
  await nested.waitFor({ timeout: 15_000 });
  assert.equal(await nested.locator('.title').textContent(), rolloutTitle(first!));
  assert.notEqual(rolloutTitle(first!), first!.label, "the task, not the run's label");
  await shot('12-grouped');
  await runRow.click();
  await waitFor(
    async () => (await panel.locator('.rollout-row.nested, .group-row.group-batch').count()) === 0,
    'collapsed again',
    5_000,
  );
}

/** Past the newest 100 runs, a last row counts the runs and rollouts left out, and shows them when clicked. */
export async function checkRunsLeftOut({ panel, client, shot }: RunListSession): Promise<void> {
  // 105 dataset runs of one rollout each (a client's own batches): more runs than the panel asks for at first.
  for (let i = 0; i < 105; i += 1)
    await client.request('createRollout', { mode: 'train', label: `nightly ${i}`, batchId: `batch-more-${i}` });
  const counted = await waitFor(
    async () => {
      const groups = await client.request('rolloutGroups', { limit: 100 });
      return groups.runCount === 106 ? groups : undefined;
    },
    'the 106 runs counted',
    15_000,
  );
  const all = await client.request('rolloutGroups', { limit: 1_000 });
  const leftOut = all.runs.slice(100);
  const left = counted.total - counted.ungrouped - counted.runs.reduce((sum, run) => sum + run.count, 0);
  assert.deepEqual([counted.runs.length, counted.more], [100, true]);
  assert.equal(
    left,
    leftOut.reduce((sum, run) => sum + run.count, 0),
    'the rollouts of the runs left out',
  );
  const apo = leftOut.find((run) => run.kind === 'training');
  assert.ok(apo?.kind === 'training', 'the APO run, the oldest, is one of those left out');
  await panel
    .locator('.toolbar .count', { hasText: new RegExp(`^${rolloutCount(counted.total)}$`) })
    .waitFor({ timeout: 15_000 });
  // The list is virtualized: the last row exists once scrolled to.
  const toBottom = (): Promise<void> =>
    panel.locator('.rollout-list').evaluate((list) => {
      const element = list as unknown as { scrollTop: number; scrollHeight: number };
      element.scrollTop = element.scrollHeight;
    });
  const more = panel.locator('.group-row.group-more');
  await waitFor(
    async () => {
      await toBottom();
      return (await more.filter({ hasText: moreRunsText(leftOut.length, left) }).count()) === 1;
    },
    `the row "${moreRunsText(leftOut.length, left)}"`,
    15_000,
  );
  await shot('13-more-runs');
  await more.click();
  const apoRow = panel.locator(`.group-row.group-run[data-run-id="${apo.runId}"]`);
  await waitFor(
    async () => {
      await toBottom();
      return (await more.count()) === 0 && (await apoRow.count()) === 1;
    },
    'every run listed, the APO run last, no "more runs" row',
    15_000,
  );
}

/**
 * The rollout rows in the document are in the order the list shows them (their `top`), as a screen reader reads the
 * options: a row that arrived above others went in before them.
 */
export async function assertRowsInListOrder(panel: FrameLocator): Promise<void> {
  const tops = await panel
    .locator('.rollout-row')
    .evaluateAll((rows) => rows.map((row) => parseFloat((row as unknown as { style: { top: string } }).style.top)));
  assert.deepEqual(
    tops,
    [...tops].sort((a, b) => a - b),
    'the rows in the document in the order they are shown',
  );
}
