/**
 * RL training from the editor in a real VS Code (code-server) in a real browser (chromium): in a
 * workspace with a small imported dataset (the demo's one-digit tools task, train and val splits)
 * and a Node launch configuration running a small agent on the real `openai` SDK (digits-agent.mjs:
 * its reward varies from sample to sample even for the untrained policy, so every iteration updates),
 * **Lightning: Start Training** is answered through its quick picks (GRPO, the tiny built-in model,
 * 2 iterations, 2 samples per task); the daemon trains with the real PyTorch worker; the run opens
 * in the panel, its charts fill in live, it finishes with checkpoints, and the store (read through
 * the CLI) holds the configuration the picks made. Screenshots go to test-results/e2e/training-*.png.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import type { TrainingRunSummary } from '../../trainer-daemon/protocol';
import { answerInputBox, pickQuickItem, pickQuickLabel, runCommand } from '../helpers/codeServer';
import { runCli } from '../helpers/daemon';
import { startE2eSession, SHOTS, type E2eSession } from '../helpers/e2eSession';
import { waitFor } from '../helpers/tmp';
import { prepareTrainingWorkspace, TRAINING_AGENT } from '../helpers/trainingWorkspace';

const AGENT_NAME = TRAINING_AGENT;

describe(
  'Start Training in VS Code (code-server + chromium): GRPO on the tiny model, live charts, checkpoints',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let page: Page;
    let panel: FrameLocator;
    let runId: string;

    before(async () => {
      session = await startE2eSession({}, prepareTrainingWorkspace);
      ({ page, panel } = session);
    });

    after(() => session?.close('extension-training'));

    const toast = (text: string | RegExp) =>
      page.locator('.notifications-toasts .notification-toast', { hasText: text }).first();
    const pickLabel = (label: string) => pickQuickLabel(page, label);
    const typeSetting = async (label: string, value: string): Promise<void> => {
      await pickLabel(label);
      await answerInputBox(page, `Start Training: ${label}`, value);
    };
    const runs = async (): Promise<TrainingRunSummary[]> => {
      const listed = await runCli(['train', '--list', '--json', '--store', session.storeFile]);
      assert.equal(listed.code, 0, listed.stderr);
      return JSON.parse(listed.stdout) as TrainingRunSummary[];
    };

    it('answers the quick picks: GRPO, tiny, the dataset, the launch configuration, 2 iterations × 2 samples', async () => {
      await runCommand(page, 'Lightning: Start Training');
      await pickQuickItem(page, 'GRPO');
      await page
        .locator('.quick-input-widget .quick-input-title', { hasText: 'base model' })
        .waitFor({ timeout: 30_000 });
      await pickLabel('tiny');
      await pickQuickItem(page, '3 train · 2 val tasks');
      // Configurations that cannot become a command are listed with the reason; the agent is a plain Node launch.
      await page
        .locator('.quick-input-widget .quick-input-title', { hasText: 'the agent' })
        .waitFor({ timeout: 15_000 });
      await pickLabel(AGENT_NAME);
      await page
        .locator('.quick-input-widget .quick-input-title', { hasText: 'settings' })
        .waitFor({ timeout: 15_000 });
      await typeSetting('Iterations', '2');
      await typeSetting('Samples per task', '2');
      await page
        .locator('.quick-input-widget .monaco-list-row', { hasText: '2 iterations · 2 samples per task' })
        .waitFor({ timeout: 15_000 });
      await session.shot('training-1-settings');
      await pickLabel('Start training');
      await toast(/Lightning: training train-/).waitFor({ timeout: 30_000 });
    });

    it('the run opens in the panel and its charts fill in as iterations are recorded', async () => {
      const detail = panel.locator('.run-detail');
      // The header names the run by what it trains (runLabel); its id is on the detail.
      await detail.locator('.run-header .run-title', { hasText: 'GRPO tiny on' }).waitFor({ timeout: 30_000 });
      runId = (await detail.getAttribute('data-run-id'))!;
      assert.match(runId, /^train-/);
      // After the first iteration: the reward chart with its band and a text summary.
      const reward = detail.locator('.chart-card[data-metric="reward/mean"]');
      await reward.locator('.chart-summary').waitFor({ timeout: 240_000 });
      assert.match((await reward.locator('.chart-summary').textContent())!, /^Reward \(sampled, ± std\): [\d.]+/);
      assert.equal(await reward.locator('polygon.band').count(), 1, 'the ± std band');
      assert.match((await reward.locator('svg').getAttribute('aria-label'))!, /^Reward \(sampled, ± std\)/);
      await detail.locator('.chart-card[data-metric="val/reward"]').waitFor({ timeout: 15_000 });
      const running = (await runs()).find((run) => run.id === runId)!;
      assert.ok(running.step >= 1, `the store has at least one iteration (step ${running.step})`);
      await detail.scrollIntoViewIfNeeded();
      await session.shot('training-2-first-iteration');
    });

    it('finishes: the notification says so, the store has the configuration the picks made, checkpoints are listed with Use', async () => {
      await toast(new RegExp(`training run ${runId} finished after 2 iteration`)).waitFor({ timeout: 240_000 });
      const run = (await runs()).find((item) => item.id === runId)!;
      assert.equal(run.status, 'succeeded');
      assert.equal(run.step, 2);
      const config = run.config as {
        model: unknown;
        dataset: string;
        iterations: number;
        samples: number;
        command: { argv: string[]; env?: Record<string, string> };
      };
      assert.deepEqual(config.model, { kind: 'tiny' });
      assert.deepEqual([config.dataset, config.iterations, config.samples], ['tools', 2, 2]);
      assert.deepEqual(
        config.command.argv,
        ['node', path.join(session.workspace, 'digits-agent.mjs')],
        'the launch configuration as a command',
      );
      assert.deepEqual(config.command.env, { AGENT_MODEL: 'tools-policy' }, 'its env travels with the run');
      const detail = panel.locator('.run-detail');
      await detail.locator('.status', { hasText: 'succeeded' }).waitFor({ timeout: 15_000 });
      await waitFor(
        async () => (await detail.locator('.checkpoint-row').count()) === 2,
        'a checkpoint per iteration in the panel',
        15_000,
      );
      await detail
        .locator('.chart-card[data-metric="reward/mean"] .chart-summary', { hasText: '(iterations 1–2)' })
        .waitFor({ timeout: 15_000 });
      for (const metric of ['loss', 'kl', 'entropy', 'tokensPerSecond', 'rollout/tokensPerSecond'])
        await detail.locator(`.chart-card[data-metric="${metric}"] .chart-summary`).waitFor({ timeout: 5_000 });
      assert.equal(
        await detail.locator('.chart-card[data-metric="gpuMemoryBytes"]').count(),
        0,
        'no GPU memory chart on a CPU run',
      );
      await detail.locator('.charts').scrollIntoViewIfNeeded();
      await session.shot('training-3-finished');
      await detail.screenshot({ path: path.join(SHOTS, 'training-3-detail.png') });
      // Use: runs lightning.useCheckpoint, or says clearly that it is not available — never nothing.
      await detail.locator('.checkpoint-row').first().locator('.use-checkpoint').click();
      await toast(/checkpoint/i).waitFor({ timeout: 15_000 });
    });

    it('Cancel in the notification stops a run; Resume in the panel continues it; Lightning: Cancel Training stops it again', async () => {
      await runCommand(page, 'Lightning: Start Training');
      await pickQuickItem(page, 'GRPO');
      await pickLabel('tiny');
      await pickQuickItem(page, '3 train · 2 val tasks');
      await pickLabel(AGENT_NAME);
      await typeSetting('Iterations', '50');
      await pickLabel('Start training');
      const progress = toast(/Lightning: training train-/);
      await progress.waitFor({ timeout: 30_000 });
      const id = /train-\w+/.exec((await progress.textContent())!)![0];
      assert.notEqual(id, runId);
      // Watched in the panel, not by polling the CLI, which competes with the run for the two cores.
      const detail = panel.locator(`.run-detail[data-run-id="${id}"]`);
      await detail.locator('.chart-card[data-metric="reward/mean"]').waitFor({ timeout: 120_000 });
      await progress.locator('.monaco-button', { hasText: 'Cancel' }).click();
      await toast(new RegExp(`training run ${id} cancelled after \\d+ iteration`)).waitFor({ timeout: 60_000 });
      assert.equal((await runs()).find((run) => run.id === id)!.status, 'cancelled');

      await detail.locator('.resume-run').click({ timeout: 15_000 });
      await detail.locator('.cancel-run').waitFor({ timeout: 30_000 });
      await session.shot('training-4-resumed');
      await runCommand(page, 'Lightning: Cancel Training');
      await pickQuickItem(page, id);
      await toast(new RegExp(`training run ${id} cancelled\\.`)).waitFor({ timeout: 60_000 });
      assert.equal((await runs()).find((run) => run.id === id)!.status, 'cancelled');
      await detail.locator('.resume-run').waitFor({ timeout: 15_000 });
    });
  },
);
