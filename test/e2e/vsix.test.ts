// needs: root
/**
 * The extension as a user meets it: the built linux-x64 .vsix installed (`--install-extension`) into the current
 * VS Code (code-server on its own Node 24), in a mount namespace where /usr/bin/node is that Node 24 too — no
 * Node 20 anywhere the editor, its extension host or the daemon could find one. The daemon runs on the editor's
 * runtime and opens the store with node:sqlite. Then the user's flow: Debug with Lightning → the rollout in the
 * panel → annotate → Score Rollouts with an ONNX reward model and a TypeScript reward function → Start Training
 * (tiny) → Use Checkpoint, and Debug with Lightning answered by the checkpoint. A smoke run of the same .vsix in
 * the oldest VS Code `engines.vscode` claims follows. After the training run, the list holds its rollouts under one
 * row named by its label, the one count agrees with the status bar, and nothing in the list is clipped at VS Code's
 * default side bar width (showcase.test.ts checks every view at two sizes and takes the Marketplace's pictures).
 * Screenshots go to test-results/e2e/vsix-*.png.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import type { TrainingRunSummary } from '../../trainer-daemon/protocol';
import { runGroupFacts, runGroupTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import { ensureEditor } from '../provision/index.mjs';
import {
  answerInputBox,
  frameWith,
  pickQuickItem,
  pickQuickLabel,
  runCommand,
  runCommandAndPick,
  countShown,
  type WorkbenchOptions,
} from '../helpers/codeServer';
import { assertDefaultSidebarWidth, clippedIn, DEFAULT_SIDEBAR_WIDTH, PANEL_LIST_CHECKS } from '../helpers/clipping';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { waitFor } from '../helpers/tmp';
import { buildVsix } from '../helpers/vsix';
import { prepareTrainingWorkspace, TRAINING_AGENT } from '../helpers/trainingWorkspace';

const AGENT_NAME = TRAINING_AGENT;

/** The current editor in a mount namespace whose /usr/bin/node is the editor's own Node 24. */
function withoutNode20(): WorkbenchOptions {
  const current = ensureEditor('current');
  return {
    editor: 'current',
    wrap: (command, args) => [
      'unshare',
      ['--mount', '--', 'sh', '-c', 'mount --bind "$0" /usr/bin/node && exec "$@"', current.node, command, ...args],
    ],
  };
}

/** Rewards for Score Rollouts: the ONNX reward model of the fixtures and a TypeScript function importing a helper. */
async function prepare(workspace: string, storeFile: string): Promise<void> {
  fs.cpSync(path.join(REPO_ROOT, 'test', 'fixtures', 'reward-model'), path.join(workspace, 'rm'), { recursive: true });
  fs.cpSync(path.join(REPO_ROOT, 'test', 'fixtures', 'rewards', 'functions'), path.join(workspace, 'fns'), {
    recursive: true,
  });
  const spec = {
    sources: [
      { type: 'model', name: 'rm', path: 'rm/model.onnx', template: '{answer}', weight: 0 },
      { type: 'function', name: 'matches', module: 'fns/matches.ts' },
    ],
  };
  fs.writeFileSync(path.join(workspace, 'user-rewards.json'), JSON.stringify({ default: spec }, null, 2));
  await prepareTrainingWorkspace(workspace, storeFile);
}

describe(
  'the installed .vsix in the current VS Code on Node 24, no Node 20 in sight',
  { concurrency: false, timeout: 600_000 },
  () => {
    let vsix: string;
    let session: E2eSession;
    let page: Page;
    let panel: FrameLocator;
    let rolloutId: string;

    before(async () => {
      vsix = await buildVsix('linux-x64');
      session = await startE2eSession({}, prepare, { ...withoutNode20(), vsix });
      ({ page, panel } = session);
    });

    after(() => session?.close('vsix'));

    const toast = (text: string | RegExp) =>
      page.locator('.notifications-toasts .notification-toast', { hasText: text }).first();
    const pickLabel = (label: string) => pickQuickLabel(page, label);

    it("the daemon starts on the editor's own Node 24 and opens the store with node:sqlite", async () => {
      await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
      await panel.locator('.daemon-state', { hasText: 'running' }).waitFor({ timeout: 90_000 });
      const announced = JSON.parse(
        fs.readFileSync(path.join(session.workspace, '.lightning', 'daemon.json'), 'utf8'),
      ) as { pid: number };
      const exe = fs.readlinkSync(`/proc/${announced.pid}/exe`);
      assert.equal(exe, fs.realpathSync(ensureEditor('current').node), "the daemon runs on the editor's runtime");
      assert.ok(!fs.readlinkSync(`/proc/${announced.pid}/exe`).startsWith('/usr/bin/'), "not on the machine's Node 20");
      const installed = fs.readdirSync(path.join(path.dirname(session.workbench.userDataDir), 'extensions'));
      assert.ok(
        installed.some((name) => name.startsWith('lightning-dev.lightning-')),
        `installed from the .vsix (${installed.join(', ')})`,
      );
      await session.shot('vsix-1-panel');
    });

    it("Debug with Lightning records the agent's rollout; the panel shows it; 👍 from the panel lands in the store", async () => {
      await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Weather agent');
      const row = panel.locator('.rollout-row', { hasText: 'Weather agent' }).first();
      await row.filter({ hasText: '2 LLM calls' }).locator('.status[title="succeeded"]').waitFor({ timeout: 90_000 });
      rolloutId = (await row.getAttribute('data-rollout-id'))!;
      await row.click();
      const detail = panel.locator(`.detail[data-rollout-id="${rolloutId}"]`);
      await detail.locator('.thumb-up').first().click();
      await waitFor(
        async () =>
          (await session.show(rolloutId)).rewards.some((reward) => reward.source === 'human' && reward.value === 1),
        'the 👍 in the store',
        15_000,
      );
      await session.shot('vsix-2-annotated');
    });

    it('Score Rollouts with an ONNX reward model and a TypeScript reward function', async () => {
      await runCommandAndPick(page, 'Lightning: Score Rollouts', 'user-rewards.json');
      await pickQuickItem(page, 'The selected rollout');
      await toast('scored: 1 rollout(s) scored, 0 without a score, 0 source error(s)').waitFor({ timeout: 120_000 });
      const { rewards } = await session.show(rolloutId);
      assert.ok(
        rewards.some((reward) => reward.source === 'model' && reward.name === 'rm' && Number.isFinite(reward.value)),
        `an ONNX score (${JSON.stringify(rewards)})`,
      );
      assert.ok(
        rewards.some((reward) => reward.name === 'matches' && reward.value === 0),
        "the TypeScript function's score (no expected answer: 0)",
      );
      await session.shot('vsix-3-scored');
    });

    it('Start Training (tiny, 2 iterations × 2 samples) finishes with checkpoints; Use Checkpoint serves the next debug session', async () => {
      await runCommand(page, 'Lightning: Start Training');
      await pickQuickItem(page, 'GRPO');
      await page
        .locator('.quick-input-widget .quick-input-title', { hasText: 'base model' })
        .waitFor({ timeout: 30_000 });
      await pickLabel('tiny');
      await pickQuickItem(page, '3 train · 2 val tasks');
      await pickLabel(AGENT_NAME);
      for (const [label, value] of [
        ['Iterations', '2'],
        ['Samples per task', '2'],
      ] as const) {
        await pickLabel(label);
        await answerInputBox(page, `Start Training: ${label}`, value);
      }
      await pickLabel('Start training');
      await toast(/training run train-\S+ finished after 2 iteration/).waitFor({ timeout: 400_000 });
      const runs = JSON.parse(
        (await runCli(['train', '--list', '--json', '--store', session.storeFile])).stdout,
      ) as TrainingRunSummary[];
      assert.equal(runs[0]!.status, 'succeeded');
      await session.shot('vsix-4-trained');

      await runCommandAndPick(page, 'Lightning: Use Checkpoint', 'step 2');
      await page.locator('.statusbar-item', { hasText: 'step 2' }).waitFor({ timeout: 180_000 });
      const calls = session.upstream.requests.length;
      await runCommandAndPick(page, 'Lightning: Debug with Lightning', AGENT_NAME);
      const served = await waitFor(
        async () => {
          const listed = JSON.parse((await runCli(['rollouts', '--json', '--store', session.storeFile])).stdout) as {
            items: Array<{ id: string; status: string; source: { kind: string } }>;
          };
          return listed.items.find(
            (item) =>
              item.source.kind === 'launch' &&
              item.id !== rolloutId &&
              item.status !== 'running' &&
              item.status !== 'queued',
          );
        },
        'the debug rollout answered by the checkpoint',
        120_000,
      );
      const detail = await session.show(served.id);
      assert.equal(detail.rollout.status, 'succeeded', detail.rollout.error ?? '');
      assert.ok(detail.servedBy?.checkpointId, 'served by the checkpoint');
      assert.equal(session.upstream.requests.length, calls, 'the checkpoint answered; the upstream got no call');
      await session.shot('vsix-5-checkpoint');
    });

    it("the list: the debug runs first, the training run's rollouts under one row named by its label, one count with the status bar; nothing clipped", async () => {
      const counted = await session.withDaemon((client) => client.request('rolloutGroups', {}));
      const [run] = counted.runs;
      assert.equal(counted.runs.length, 1, 'the training run: one group, its iterations inside it');
      assert.ok(run?.kind === 'training', 'a training run');
      assert.equal(counted.ungrouped, 2, 'the two debug sessions');
      assert.equal(counted.total, counted.ungrouped + run.count);
      assert.ok(run.batches.length >= 2, 'its iterations and validations, inside it');
      await countShown(page, counted.total);
      const row = panel.locator(`.group-row.group-run[data-run-id="${run.runId}"]`);
      await row.waitFor({ timeout: 15_000 });
      assert.equal(await row.locator('.title').textContent(), runGroupTitle(run));
      assert.equal(runGroupTitle(run), 'GRPO tiny on tools');
      assert.equal(await row.locator('.group-facts').textContent(), runGroupFacts(run));
      assert.match(runGroupFacts(run), /^2 iterations · /);
      assert.equal(await panel.locator('.group-row').count(), 1, 'one row for the whole run');
      assert.equal(await assertDefaultSidebarWidth(page), DEFAULT_SIDEBAR_WIDTH);
      assert.deepEqual(await clippedIn(await frameWith(page, '.rollout-list .group-row'), PANEL_LIST_CHECKS), []);
      await session.shot('vsix-6-grouped');
    });
  },
);

describe(
  'the same .vsix in the oldest VS Code engines.vscode claims: a smoke run',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;

    before(async () => {
      session = await startE2eSession({}, undefined, { editor: 'oldest', vsix: await buildVsix('linux-x64') });
    });

    after(() => session?.close('vsix-oldest'));

    it('installs, starts its daemon and records a Debug with Lightning rollout', async () => {
      const { page, panel } = session;
      await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
      await panel.locator('.daemon-state', { hasText: 'running' }).waitFor({ timeout: 90_000 });
      await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Weather agent');
      await panel
        .locator('.rollout-row', { hasText: 'Weather agent' })
        .filter({ hasText: '2 LLM calls' })
        .locator('.status[title="succeeded"]')
        .first()
        .waitFor({ timeout: 90_000 });
      await session.shot('vsix-oldest-1-rollout');
    });
  },
);
