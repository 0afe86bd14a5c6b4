/**
 * Use Checkpoint in a real VS Code (code-server + chromium): a checkpoint saved by the real trainer
 * worker is chosen from the command palette, the status bar shows it, and a Debug with Lightning
 * session of an unchanged `openai` SDK agent is answered by it — not by the scripted upstream the
 * workspace is configured with — with token ids, its rollout naming the checkpoint; Delete Checkpoint refuses it
 * while it is in use; Stop Using Checkpoint goes back and the daemon stops serving it. The panel's checkpoint rows
 * show sizes and the run's total on disk, and Delete on a row asks first, then removes the row and its folder.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Rollout } from '../../trainer-daemon/protocol';
import { formatBytes } from '../../trainer-daemon/protocol/format';
import { pickQuickItem, runCommand, runCommandAndPick } from '../helpers/codeServer';
import { storeWithCheckpoints } from '../helpers/checkpoints';
import { runCli } from '../helpers/daemon';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { waitFor } from '../helpers/tmp';

describe('Use Checkpoint in VS Code (code-server + chromium)', { concurrency: false, timeout: 600_000 }, () => {
  let session: E2eSession;
  let checkpoints: Awaited<ReturnType<typeof storeWithCheckpoints>>;

  before(async () => {
    session = await startE2eSession();
    // The extension starts its daemon on first use: the store is made before that.
    checkpoints = await storeWithCheckpoints(session.workspace, ['node', 'agent.mjs']);
  });

  after(() => session?.close('checkpoint'));

  it('Use Checkpoint from the palette, then Debug with Lightning: the checkpoint answers the session', async () => {
    const { page, upstream } = session;
    const [, newest] = checkpoints.ids;
    await runCommand(page, 'Lightning: Use Checkpoint');
    // Newest first (step 3, whose folder is gone, then 2 and 1), each with its key metrics.
    const rows = page.locator('.quick-input-widget .quick-input-list .monaco-list-row');
    await rows.filter({ hasText: 'step 2' }).filter({ hasText: 'reward 0.500' }).waitFor({ timeout: 60_000 });
    assert.deepEqual(
      (await rows.allInnerTexts()).map((text) => /step \d/.exec(text)?.[0]),
      ['step 3', 'step 2', 'step 1'],
    );
    await pickQuickItem(page, 'step 2');
    const inUse = page.locator('.statusbar-item', { hasText: 'step 2' });
    await inUse.waitFor({ timeout: 120_000 });
    await session.shot('checkpoint-01-in-use');

    await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Weather agent');
    const rollout = await waitFor(
      async () => {
        const listed = await runCli(['rollouts', '--json', '--store', session.storeFile]);
        const items = listed.code === 0 ? (JSON.parse(listed.stdout) as { items: Rollout[] }).items : [];
        return items.find((r) => r.source.kind === 'launch' && r.status !== 'running' && r.status !== 'queued');
      },
      'the debug rollout to finish',
      120_000,
    );
    const detail = await session.show(rollout.id);
    assert.equal(detail.rollout.status, 'succeeded', detail.rollout.error ?? '');
    assert.equal(detail.servedBy?.checkpointId, newest);
    const calls = detail.spans.filter((span) => span.category === 'llm');
    assert.ok(calls.length >= 1 && calls.every((span) => span.statusCode === 'ok'));
    const response = calls[0]!.attributes['lightning.response'] as { prompt_token_ids?: number[] };
    assert.ok(response.prompt_token_ids?.length, 'token ids recorded, as in training');
    assert.equal(
      upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length,
      0,
      'the configured upstream was not asked',
    );
    // The panel's trajectory header says which checkpoint answered.
    await runCommand(page, 'Lightning: Show Panel');
    await session.panel.locator(`.rollout-row[data-rollout-id="${rollout.id}"]`).click({ timeout: 30_000 });
    await session.panel
      .locator('.detail .served-by', { hasText: `served by checkpoint ${newest}` })
      .waitFor({ timeout: 15_000 });
    await session.shot('checkpoint-02-debugged');

    // Delete Checkpoint refuses the checkpoint in use, saying how to stop using it; nothing is deleted.
    await runCommand(page, 'Lightning: Delete Checkpoint…');
    await pickQuickItem(page, 'step 2');
    await page
      .locator('.notifications-toasts .notification-toast', { hasText: 'is in use (Use Checkpoint)' })
      .first()
      .waitFor({ timeout: 30_000 });
    assert.ok(fs.existsSync(path.join(session.workspace, 'ckpt', '2')), 'the served checkpoint stays');

    await runCommand(page, 'Lightning: Stop Using Checkpoint');
    await inUse.waitFor({ state: 'hidden', timeout: 30_000 });
    await session.withDaemon((client) =>
      waitFor(
        async () => ((await client.request('currentPolicy', {})).served === null ? true : undefined),
        'the daemon to stop serving',
        30_000,
      ),
    );
  });

  it('the panel shows the run’s checkpoints on disk; Delete on a row asks first, then the row and its folder are gone', async () => {
    const { page, panel } = session;
    const [oldest] = checkpoints.ids;
    await runCommand(page, 'Lightning: Show Panel');
    const runs = panel.locator('.training-runs');
    if ((await runs.getAttribute('open')) === null) await runs.locator('> summary').click();
    await panel.locator(`.run-row[data-run-id="${checkpoints.runId}"]`).click({ timeout: 30_000 });
    const detail = panel.locator('.run-detail');
    // Three checkpoints, one of them without its folder: the total is what is on disk.
    await detail.locator('h4', { hasText: 'Checkpoints (3)' }).waitFor({ timeout: 30_000 });
    const onDisk = (): Promise<string> =>
      session.withDaemon(async (client) => {
        const { items } = await client.request('listCheckpoints', { runId: checkpoints.runId });
        return `${formatBytes(items.reduce((sum, c) => sum + (c.bytes ?? 0), 0))} on disk`;
      });
    await detail.locator('.checkpoints-total', { hasText: await onDisk() }).waitFor({ timeout: 5_000 });
    await detail.locator('.checkpoint-row .checkpoint-size', { hasText: 'missing' }).waitFor({ timeout: 5_000 });
    const row = detail.locator(`.checkpoint-row[data-checkpoint-id="${oldest}"]`);
    await row.locator('.delete-checkpoint').click();
    const dialog = page.locator('.monaco-dialog-box', { hasText: `Delete checkpoint step 1 of ${checkpoints.runId}` });
    await dialog.waitFor({ timeout: 15_000 });
    assert.match(await dialog.innerText(), /this cannot be undone/);
    await session.shot('checkpoint-03-delete');
    await dialog.locator('.monaco-button', { hasText: /^Delete$/ }).click();
    await row.waitFor({ state: 'detached', timeout: 30_000 });
    await detail.locator('h4', { hasText: 'Checkpoints (2)' }).waitFor({ timeout: 15_000 });
    await detail.locator('.checkpoints-total', { hasText: await onDisk() }).waitFor({ timeout: 15_000 });
    assert.equal(fs.existsSync(path.join(session.workspace, 'ckpt', '1')), false, 'its folder is deleted');
  });
});
