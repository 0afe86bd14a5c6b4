// needs: root
/**
 * What a user sees, in the built linux-x64 .vsix installed into the current VS Code on its own Node 24 (as
 * vsix.test.ts installs it): two Debug with Lightning runs, a Run Dataset batch of the weather agent, and a real
 * run of the offline demo (recorded: test/fixtures/demo-run.json, its metrics by step, written into the store
 * before the editor opens — 16 iterations took 12 minutes here, more than a test file's limit). Checked: the list
 * grouped by run with one count; nothing clipped, across or down (the panel's list, a rollout tab, Compare, the run
 * tab) at VS Code's default side bar width and at 1280×800; then the Marketplace's and the walkthrough's pictures,
 * at 1280×800 with a real font (`npm run screenshots` copies them into media/screenshots/). Screenshots go to
 * test-results/e2e/showcase-*.png and marketing-*.png.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Frame, FrameLocator, Page } from 'playwright-core';
import { GrpoConfig, type RolloutRunGroup } from '../../trainer-daemon/protocol';
import { findDaemon } from '../../trainer-daemon/protocol/node/discovery';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { rolloutTitle, runGroupFacts, runGroupTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import { runTitle } from '../../trainer-daemon/protocol/ui/trainingRunFormat';
import { ensureEditor } from '../provision/index.mjs';
import {
  answerInputBox,
  frameWith,
  pickQuickItem,
  runCommand,
  runCommandAndPick,
  countShown,
  type WorkbenchOptions,
} from '../helpers/codeServer';
import {
  assertDefaultSidebarWidth,
  CHART_CHECKS,
  clippedIn,
  DEFAULT_SIDEBAR_WIDTH,
  PANEL_LIST_CHECKS,
  type ClipCheck,
} from '../helpers/clipping';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { SHOTS, startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { buildVsix } from '../helpers/vsix';
import { PICTURES } from '../../.ci/screenshots.mjs';

/** A real demo run as the store kept it (test/fixtures/demo-run.json). */
interface RecordedRun {
  readonly config: Omit<GrpoConfig, 'command'>;
  readonly steps: Readonly<Record<string, Readonly<Record<string, number>>>>;
}

/** The current editor in a mount namespace whose /usr/bin/node is the editor's own Node 24 (as vsix.test.ts). */
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

/**
 * The weather tasks imported as a dataset, and the recorded demo run written into the store, before the editor opens.
 */
async function prepare(workspace: string, storeFile: string): Promise<string> {
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  // The weather agent reads its city; the question is what the list and Compare show of each task.
  const tasks = ['Oslo', 'Paris'].map((city) =>
    JSON.stringify({ id: city.toLowerCase(), city, question: `What is the weather in ${city}?` }),
  );
  fs.writeFileSync(path.join(workspace, 'weather.jsonl'), `${tasks.join('\n')}\n`);
  const imported = await runCli([
    'dataset',
    'import',
    path.join(workspace, 'weather.jsonl'),
    '--name',
    'weather',
    '--store',
    storeFile,
  ]);
  assert.equal(imported.code, 0, imported.stderr);
  const recorded = JSON.parse(
    fs.readFileSync(path.join(REPO_ROOT, 'test', 'fixtures', 'demo-run.json'), 'utf8'),
  ) as RecordedRun;
  const store = Store.open(storeFile);
  try {
    const config = GrpoConfig.parse({
      ...recorded.config,
      command: { argv: ['node', 'demo-agent.mjs'], cwd: workspace },
    });
    const run = store.recordTrainingRun({ algorithm: 'grpo', config });
    store.setTrainingRunStatus(run.id, 'running');
    for (const [step, metrics] of Object.entries(recorded.steps))
      store.recordTrainingStep(run.id, Number(step), metrics);
    store.setTrainingRunStatus(run.id, 'succeeded');
    return run.id;
  } finally {
    store.close();
  }
}

describe(
  'what a user sees in the installed .vsix: the list grouped by run, nothing clipped, the Marketplace pictures',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let page: Page;
    let panel: FrameLocator;
    let client: RpcClient;
    let runId = '';
    let datasetRun: RolloutRunGroup & { kind: 'batch' };
    const own: string[] = [];

    before(async () => {
      session = await startE2eSession(
        {},
        async (workspace, storeFile) => void (runId = await prepare(workspace, storeFile)),
        { ...withoutNode20(), vsix: await buildVsix('linux-x64') },
      );
      ({ page, panel } = session);
    });

    after(async () => {
      client?.dispose();
      await session?.close('showcase');
    });

    it('two debug runs and a dataset run: own runs first, the dataset run one collapsed row named by its dataset, one count everywhere', async () => {
      // The current VS Code opens an empty secondary side bar beside the editor: closed, as a user would.
      const secondary = page.locator('.part.auxiliarybar');
      if (await secondary.isVisible()) {
        await runCommand(page, 'View: Hide Secondary Side Bar');
        await secondary.waitFor({ state: 'hidden', timeout: 15_000 });
      }
      await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
      await panel.locator('.daemon-state', { hasText: 'running' }).waitFor({ timeout: 90_000 });
      for (const name of ['Weather agent', 'Weather agent (recorded)']) {
        await runCommandAndPick(page, 'Lightning: Debug with Lightning', name);
        // The second name is the first's and more: each run's row is the newest one of its own name.
        const row = panel
          .locator('.rollout-row:not(.nested)', { hasText: name })
          .filter({ hasText: '2 LLM calls' })
          .filter({ has: panel.locator('.status[title="succeeded"]') })
          .first();
        await row.waitFor({ timeout: 90_000 });
        own.push((await row.getAttribute('data-rollout-id'))!);
      }
      await runCommandAndPick(page, 'Lightning: Run Dataset', 'weather');
      await pickQuickItem(page, 'Weather agent');
      await answerInputBox(page, 'rollouts per task', '2');
      await answerInputBox(page, 'agents running at once');
      await page
        .locator('.notifications-toasts .notification-toast', { hasText: /finished: 4 rollouts over 2 tasks/ })
        .first()
        .waitFor({ timeout: 120_000 });
      // Run Dataset shows its batch alone; the whole list again:
      await panel.locator('.scope .clear-scope').click({ timeout: 15_000 });

      const daemon = findDaemon(session.storeFile)!;
      client = await RpcClient.connect(daemon.info.url, daemon.token);
      const counted = await client.request('rolloutGroups', {});
      assert.equal(counted.ungrouped, 2, 'the two debug runs');
      assert.equal(counted.runs.length, 1, 'the dataset run');
      const [run] = counted.runs;
      assert.ok(run?.kind === 'batch');
      datasetRun = run;
      assert.equal(counted.total, 6);
      await countShown(page, 6);
      const runRow = panel.locator(`.group-row.group-run[data-batch-id="${datasetRun.batchId}"]`);
      assert.equal(await runRow.locator('.title').textContent(), runGroupTitle(datasetRun));
      assert.equal(runGroupTitle(datasetRun), 'weather · dataset run');
      assert.equal(await runRow.locator('.group-facts').textContent(), runGroupFacts(datasetRun));
      assert.equal(await panel.locator('.rollout-row').count(), 2, 'its rollouts collapsed');
      await runRow.click();
      const [first] = (await client.request('listRollouts', { batchId: datasetRun.batchId, limit: 1 })).items;
      const nested = panel.locator(`.rollout-row.nested[data-rollout-id="${first!.id}"]`);
      await nested.waitFor({ timeout: 15_000 });
      assert.equal(await nested.locator('.title').textContent(), rolloutTitle(first!));
      assert.match(rolloutTitle(first!), /^What is the weather in (Oslo|Paris)\?$/, 'the task, not the label');
      await session.shot('showcase-1-grouped');
    });

    it('nothing is clipped, across or down, at the default side bar width and at 1280×800: the panel, a rollout tab, Compare, the run tab', async () => {
      const sizes = [page.viewportSize()!, { width: 1280, height: 800 }];
      const pair = await datasetPair();
      try {
        for (const size of sizes) {
          await page.setViewportSize(size);
          const name = `${size.width}x${size.height}`;
          assert.equal(await assertDefaultSidebarWidth(page), DEFAULT_SIDEBAR_WIDTH);
          await openRunTab();
          const list = await frameWith(page, '.rollout-list .group-row');
          assert.deepEqual(await clippedIn(list, PANEL_LIST_CHECKS), [], `the panel at ${name}`);
          await session.shot(`showcase-2-panel-${name}`);

          await panel.locator(`.rollout-row[data-rollout-id="${own[0]}"]`).click();
          const rollout = await frameWith(
            page,
            `.rollout-tab[data-rollout-id="${own[0]}"] .timeline[data-complete-paint-at]`,
          );
          await rollout.locator('.conversation .turn').first().waitFor({ timeout: 30_000 });
          assert.deepEqual(await clippedIn(rollout, ROLLOUT_TAB_CHECKS), [], `the rollout tab at ${name}`);
          await session.shot(`showcase-3-rollout-${name}`);

          await openCompare(pair);
          const compare = await frameWith(page, `.compare-tab[data-right="${pair[1]}"][data-complete-at]`);
          assert.deepEqual(await clippedIn(compare, COMPARE_TAB_CHECKS), [], `Compare at ${name}`);
          await session.shot(`showcase-4-compare-${name}`);

          const run = await openRunTab();
          assert.deepEqual(await clippedIn(run, [...CHART_CHECKS, ...RUN_TAB_CHECKS]), [], `the run tab at ${name}`);
          await session.shot(`showcase-5-run-${name}`);
        }
      } finally {
        await page.setViewportSize(sizes[0]!);
      }
    });

    it("takes the Marketplace's and the walkthrough's pictures: the reward rising, a rollout, Compare, the grouped list", async () => {
      await page.setViewportSize({ width: 1280, height: 800 });
      // The run tab, titled by its label: the demo's sampled reward over its iterations.
      const run = await openRunTab();
      const reward = run.locator('.chart-card.large[data-metric="reward/mean"]');
      await reward.locator('svg').waitFor({ timeout: 30_000 });
      const { run: recorded } = await session.showRun(runId);
      await page.locator('.tabs-container .tab', { hasText: runTitle(recorded) }).waitFor({ timeout: 15_000 });
      assert.match((await reward.locator('.chart-summary').textContent()) ?? '', /0\.2\d* → 0\.4/);
      await marketing('training');
      await reward.screenshot({ path: path.join(SHOTS, 'marketing-walkthrough-training.png') });

      // A debug run's tab: its waterfall, and the LLM call with its tool call as a conversation.
      await panel.locator(`.rollout-row[data-rollout-id="${own[0]}"]`).dblclick();
      const rollout = await frameWith(page, `.rollout-tab[data-rollout-id="${own[0]}"] .conversation .turn`);
      await marketing('rollout');
      await rollout.locator('.rollout-top').screenshot({ path: path.join(SHOTS, 'marketing-walkthrough-rollout.png') });

      // Two rollouts of the dataset run side by side.
      await openCompare(await datasetPair());
      await marketing('compare');

      // The list: the own runs first, the dataset run open, a debug run selected with its reward buttons.
      const runs = panel.locator('details.training-runs');
      if ((await runs.getAttribute('open')) !== null) await runs.locator('> summary').click();
      await panel.locator(`.rollout-row[data-rollout-id="${own[0]}"]`).click();
      await panel.locator(`.detail[data-rollout-id="${own[0]}"] .thumb-up`).first().waitFor({ timeout: 15_000 });
      await marketing('panel');
      const sidebar = (await page.locator('.part.sidebar').boundingBox())!;
      await page.screenshot({
        path: path.join(SHOTS, 'marketing-walkthrough-panel.png'),
        clip: { x: sidebar.x, y: sidebar.y, width: sidebar.width, height: Math.min(sidebar.height, 700) },
      });
      for (const name of Object.keys(PICTURES))
        assert.ok(fs.statSync(path.join(SHOTS, name)).size > 10_000, `${name} was taken`);
    });

    /** A full-window picture for the Marketplace page, the notifications out of the way. */
    async function marketing(name: string): Promise<void> {
      await runCommand(page, 'Notifications: Clear All Notifications');
      await page.mouse.move(0, 0);
      await page.screenshot({ path: path.join(SHOTS, `marketing-${name}.png`) });
    }

    /** Two rollouts of the dataset run, of different tasks. */
    async function datasetPair(): Promise<[string, string]> {
      const { items } = await client.request('listRollouts', { batchId: datasetRun.batchId, limit: 10 });
      const left = items[0]!;
      const right = items.find((rollout) => rollout.task?.id !== left.task?.id);
      assert.ok(right, 'two tasks in the dataset run');
      return [left.id, right.id];
    }

    /**
     * Lightning: Compare Rollouts, each rollout picked by its id (the quick pick matches on it). In one run the second
     * quick pick closed before it was typed in (a quick pick closes when the focus moves): then it is asked again.
     */
    async function openCompare([left, right]: [string, string]): Promise<void> {
      for (let attempt = 1; ; attempt += 1) {
        try {
          await runCommand(page, 'Lightning: Compare Rollouts');
          await page.locator('.quick-input-widget input').fill(left, { timeout: 15_000 });
          await pickQuickItem(page, left);
          // The second pick is a quick pick of its own ("Compare … with…"): wait for it, not the first one closing.
          await page
            .locator('.quick-input-widget .quick-input-title', { hasText: 'with…' })
            .waitFor({ timeout: 15_000 });
          await page.locator('.quick-input-widget input').fill(right, { timeout: 15_000 });
          await pickQuickItem(page, right);
          await frameWith(page, `.compare-tab[data-right="${right}"][data-complete-at]`, 60_000);
          return;
        } catch (error) {
          if (attempt === 3) throw error;
          await page.keyboard.press('Escape');
        }
      }
    }

    /** The recorded demo run's tab, opened from the panel's Training runs section. */
    async function openRunTab(): Promise<Frame> {
      const section = panel.locator('details.training-runs');
      if ((await section.getAttribute('open')) === null) await section.locator('> summary').click();
      await panel.locator(`.run-row[data-run-id="${runId}"]`).click({ timeout: 30_000 });
      await panel.locator('.open-run-tab').click({ timeout: 30_000 });
      return frameWith(page, '.run-tab .chart-card.large svg', 60_000);
    }
  },
);

/** A rollout tab: its header, the waterfall and its handle, the step's detail, each inside the tab and the window. */
const ROLLOUT_TAB_CHECKS: readonly ClipCheck[] = [
  { container: '.rollout-tab', elements: '.tab-header, .timeline, .timeline-resizer, .span-detail', vertical: true },
  {
    container: '.tab-header',
    elements: '.tab-header h2, .tab-header .facts, .tab-header vscode-button',
    vertical: true,
  },
  {
    container: '.span-detail',
    elements: '.detail-head, .step-annotation vscode-button, .step-annotation vscode-textfield',
  },
  { container: '.turn', elements: '.turn-head' },
];

/** Compare: each side's title line and its cells inside the grid. */
const COMPARE_TAB_CHECKS: readonly ClipCheck[] = [
  { container: '.compare-title', elements: '.compare-title > *', vertical: true },
  { container: '.compare-grid', elements: '.compare-cell, .compare-label' },
  { container: '.compare-tab', elements: '.compare-summary, .compare-steps' },
];

/** The run tab's header, tools and charts. */
const RUN_TAB_CHECKS: readonly ClipCheck[] = [
  { container: '.run-tab', elements: '.tab-header h2, .chart-tools > *, .smoothing-control, .chart-card' },
  { container: '.tab-header', elements: '.tab-header h2, .tab-header .facts', vertical: true },
];
