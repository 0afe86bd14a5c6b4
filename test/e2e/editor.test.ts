/**
 * The extension in a real VS Code (code-server) in a real browser (chromium): a Node agent on the
 * real `openai` SDK is run with Debug with Lightning against a scripted upstream; a breakpoint hits
 * while it is instrumented; its rollout appears in the side panel live with its LLM calls and tool
 * call; rewards annotated from the panel and from the command palette land in the store (checked
 * with the CLI); the daemon is killed and restarted by the extension; a second rollout (a launch
 * configuration with `"lightning": true`) appears without reload; Optimize This Prompt on a string
 * literal runs APO, shows the leaderboard, and Apply edits the file (undoably). Screenshots go to
 * test-results/e2e/.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import {
  answerInputBox,
  continueIfPaused,
  countShown,
  frameWith,
  goToLine,
  openFile,
  panelFrame,
  setBreakpoint,
  pickQuickItem,
  runCommand,
  runCommandAndPick,
  statusBarItem,
  type Workbench,
} from '../helpers/codeServer';
import { SHOTS, startE2eSession, type E2eSession } from '../helpers/e2eSession';
import type { ScriptedUpstream } from '../helpers/scriptedUpstream';
import { runCli } from '../helpers/daemon';
import { SEED_PROMPT } from '../helpers/apo';
import { encodeLiteral } from '../../trainer-daemon/protocol';
import { waitFor } from '../helpers/tmp';
import type { Reward, RolloutDetail } from '../../trainer-daemon/protocol';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { failureHeadline, failureOutput } from '../../trainer-daemon/protocol/failureText';
import { addCrashingAgent, CRASH_KEY, resourceFields, sumsOrDefault } from '../helpers/e2eEditorWorld';
import { measurePanelTimings } from '../helpers/e2ePanelTimings';
import { assertRowsInListOrder, checkRunsGrouped, checkRunsLeftOut } from '../helpers/e2eRunListChecks';

describe('the extension in VS Code (code-server + chromium)', { concurrency: false, timeout: 600_000 }, () => {
  let session: E2eSession;
  let workspace: string;
  let upstream: ScriptedUpstream;
  let workbench: Workbench;
  let page: Page;
  let panel: FrameLocator;
  let firstRolloutId: string;

  const storeFile = (): string => session.storeFile;
  const shot = (name: string): Promise<Buffer> => session.shot(name);
  const show = (id: string): Promise<RolloutDetail> => session.show(id);
  const daemonPid = (): number | undefined => {
    try {
      return (JSON.parse(fs.readFileSync(path.join(workspace, '.lightning', 'daemon.json'), 'utf8')) as { pid: number })
        .pid;
    } catch {
      return undefined;
    }
  };

  before(async () => {
    session = await startE2eSession({ chat: sumsOrDefault }, addCrashingAgent);
    ({ workspace, upstream, workbench, page, panel } = session);
  });

  after(() => session?.close('extension'));

  it('opens the Lightning panel from the activity bar and starts the daemon', async () => {
    await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
    // The daemon's state is the status line's, not a badge among the filters.
    await panel.locator('.status-line .daemon-state', { hasText: 'Daemon running' }).waitFor({ timeout: 60_000 });
    assert.equal(await panel.locator('.toolbar .daemon-state').count(), 0);
    await panel.locator('.empty', { hasText: 'No rollouts yet' }).waitFor({ timeout: 15_000 });
    await countShown(page, 0);
    assert.ok(daemonPid(), 'the daemon announced itself in .lightning/daemon.json');
    await shot('01-panel-empty');
  });

  it('Debug with Lightning: a breakpoint hits while the agent is instrumented, and the rollout shows live', async () => {
    // A breakpoint on the line after the first LLM call (F9 in the editor).
    await setBreakpoint(page, workspace, 'agent.mjs', 'BREAKPOINT');

    await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Weather agent');
    await page.locator('.debug-toolbar').waitFor({ timeout: 60_000 });
    // Paused: the debug toolbar offers Continue.
    await page.locator('.debug-toolbar .codicon-debug-continue').waitFor({ timeout: 60_000 });
    assert.equal(
      upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length,
      1,
      'paused after the first LLM call',
    );

    // While paused, the running rollout is already in the panel with its first LLM call.
    await runCommand(page, 'Lightning: Show Panel');
    const row = panel.locator('.rollout-row', { hasText: 'Weather agent' }).first();
    await row.filter({ hasText: '1 LLM call' }).waitFor({ timeout: 15_000 });
    firstRolloutId = (await row.getAttribute('data-rollout-id'))!;
    await shot('02-paused-at-breakpoint');

    await page.locator('.debug-toolbar .codicon-debug-continue').click();
    await row.filter({ hasText: '2 LLM calls' }).locator('.status[title="succeeded"]').waitFor({ timeout: 60_000 });
    const detail = await show(firstRolloutId);
    assert.equal(detail.rollout.status, 'succeeded');
    assert.equal(detail.rollout.exitCode, 0);
    assert.equal(detail.rollout.source.kind, 'launch');
    assert.equal(detail.rollout.llmCalls, 2);
    // The agent reached the proxy with the placeholder key and the scripted upstream answered it.
    assert.equal(upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length, 2);
  });

  it('shows the trajectory of the selected rollout: LLM calls, messages, the tool call, the response', async () => {
    await panel.locator(`.rollout-row[data-rollout-id="${firstRolloutId}"]`).click();
    const detail = panel.locator(`.detail[data-rollout-id="${firstRolloutId}"]`);
    await detail.waitFor({ timeout: 15_000 });
    // The click opened the rollout's preview tab, which shows the steps: the panel shows a summary, and them on
    // request.
    await detail.locator('.in-tab-note .show-here').click({ timeout: 15_000 });
    const steps = detail.locator('details.step.kind-llm');
    await waitFor(async () => (await steps.count()) === 2, 'two LLM steps', 15_000);
    await steps.nth(0).locator('summary').click();
    await steps.nth(0).locator('.tool-call', { hasText: 'get_weather' }).waitFor({ timeout: 5_000 });
    await steps.nth(1).locator('summary').click();
    await steps.nth(1).locator('.message.role-tool', { hasText: 'sunny, 24°C' }).waitFor({ timeout: 5_000 });
    await steps.nth(1).locator('.response', { hasText: 'It is sunny in Paris.' }).waitFor({ timeout: 5_000 });
    await steps.nth(1).locator('.show-raw').click();
    await steps.nth(1).locator('.raw-json', { hasText: '"category": "llm"' }).waitFor({ timeout: 5_000 });
    await shot('03-trajectory');
  });

  it('annotates Good (1) from the panel and a number with a comment from the command palette; both are in the store', async () => {
    await panel.locator(`.detail[data-rollout-id="${firstRolloutId}"] .detail-header .thumb-up`).click();
    await panel.locator('.reward-row', { hasText: '1 (good)' }).waitFor({ timeout: 15_000 });

    await runCommand(page, 'Lightning: Annotate Reward');
    await page
      .locator('.quick-input-widget .quick-input-title', { hasText: 'Weather agent' })
      .waitFor({ timeout: 15_000 });
    // Typed into the pick's own box: keys sent to the page while the panel's webview still has focus would be lost.
    const input = page.locator('.quick-input-widget .quick-input-box input');
    await input.fill('0.5', { timeout: 10_000 });
    await page.locator('.quick-input-list .monaco-list-row', { hasText: '0.5' }).first().waitFor({ timeout: 15_000 });
    await input.press('Enter');
    await answerInputBox(page, 'comment', 'right tool, terse answer');
    await panel.locator('.reward-row', { hasText: 'right tool, terse answer' }).waitFor({ timeout: 15_000 });
    await shot('04-annotated');

    const rewards: Reward[] = (await show(firstRolloutId)).rewards.filter((reward) => reward.source === 'human');
    assert.deepEqual(
      rewards.map((reward) => [reward.value, reward.comment]),
      [
        [1, null],
        [0.5, 'right tool, terse answer'],
      ],
    );
    assert.equal((await show(firstRolloutId)).rollout.reward, 0.5, 'the latest human annotation is the rollout reward');
  });

  it('restarts the daemon after it crashes; a second rollout ("lightning": true in launch.json) appears live', async () => {
    const before = daemonPid()!;
    process.kill(before, 'SIGKILL');
    const after = await waitFor(
      () => {
        const pid = daemonPid();
        return pid !== undefined && pid !== before && isProcessAlive(pid) ? pid : undefined;
      },
      'a new daemon',
      30_000,
    );
    assert.notEqual(after, before);
    await statusBarItem(page).filter({ hasText: '1 rollout' }).waitFor({ timeout: 30_000 });
    await statusBarItem(page).click();
    await panel.locator('.daemon-state', { hasText: 'running' }).waitFor({ timeout: 15_000 });

    // The configuration that asks for Lightning itself; it stops at the same breakpoint.
    await runCommandAndPick(page, 'Debug: Select and Start Debugging', 'Weather agent (recorded)');
    await page.locator('.debug-toolbar .codicon-debug-continue').click({ timeout: 60_000 });
    const second = panel.locator('.rollout-row', { hasText: 'Weather agent (recorded)' }).first();
    await second.locator('.status[title="succeeded"]').waitFor({ timeout: 60_000 });
    assert.equal(await panel.locator('.rollout-row').count(), 2);
    // The second arrived above the first, which was on screen: the document holds them in the order shown.
    await assertRowsInListOrder(panel);
    await statusBarItem(page).filter({ hasText: '2 rollouts' }).waitFor({ timeout: 15_000 });
    // One count, the status bar's, after the reconnection's reload too.
    await panel.locator('.toolbar .count', { hasText: /^2 rollouts$/ }).waitFor({ timeout: 15_000 });
    const id = (await second.getAttribute('data-rollout-id'))!;
    assert.equal((await show(id)).rollout.llmCalls, 2);
    await shot('05-second-rollout-after-restart');
  });

  it('launch.json knows "lightning": true (the extension contributes it to the debug types): its hover describes it', async () => {
    await openFile(page, '.vscode/launch.json');
    const key = page.locator('.monaco-editor .view-line span', { hasText: /^"lightning"$/ }).first();
    await key.waitFor({ timeout: 15_000 });
    // The JSON language server validates launch.json against the debuggers' schemas: an unknown key has no description.
    // The cursor on the key, then the hover from the keyboard (a mouse hover is at the mercy of the pointer's history).
    const described = page.locator('.monaco-hover', { hasText: 'Record this launch as a Lightning rollout' }).first();
    await waitFor(
      async () => {
        await key.click();
        await runCommand(page, 'Show or Focus Hover');
        if (
          await described.waitFor({ timeout: 3_000 }).then(
            () => true,
            () => false,
          )
        )
          return true;
        await page.keyboard.press('Escape');
        return undefined;
      },
      'the hover with the "lightning" description',
      30_000,
    );
    await shot('05b-launch-json-hover');
    await page.keyboard.press('Escape');
  });

  it('measures (printed, not asserted): a new rollout in the panel after its first span; a 2,000-span rollout opening', () =>
    session.withDaemon((client) => measurePanelTimings(page, client, shot)));

  it('Review Unrated Rollouts: n skips, a typed 0 rates the rollout shown and advances', async () => {
    await runCommand(page, 'Lightning: Review Unrated Rollouts');
    const title = page.locator('.quick-input-widget .quick-input-title');
    await title.filter({ hasText: 'Review 1/2' }).filter({ hasText: 'big rollout' }).waitFor({ timeout: 15_000 });
    // Typed into the box itself: keys sent to the page before the box has focus (a loaded machine) would go elsewhere.
    const input = page.locator('.quick-input-widget .quick-input-box input');
    await input.fill('n', { timeout: 10_000 });
    await input.press('Enter');
    await title
      .filter({ hasText: 'Review 2/2' })
      .filter({ hasText: 'Weather agent (recorded)' })
      .waitFor({ timeout: 30_000 });
    await panel.locator('.detail .detail-header', { hasText: 'Weather agent (recorded)' }).waitFor({ timeout: 30_000 });
    const id = (await panel.locator('.detail').getAttribute('data-rollout-id'))!;
    await input.fill('0', { timeout: 10_000 });
    await input.press('Enter');
    await page
      .locator('.notifications-toasts', { hasText: 'review done, 1 rollout(s) rated' })
      .waitFor({ timeout: 30_000 });
    await shot('07-review-queue');
    const detail = await show(id);
    assert.equal(detail.rollout.label, 'Weather agent (recorded)');
    assert.deepEqual(
      detail.rewards.map((reward) => [reward.value, reward.source]),
      [[0, 'human']],
    );
  });

  it('a second window reuses the daemon and sees an annotation made in the first one live', async () => {
    const pid = daemonPid();
    const second = await workbench.openWindow();
    try {
      await runCommand(second, 'Lightning: Show Panel');
      const secondPanel = panelFrame(second);
      const probe = secondPanel.locator('.rollout-row', { hasText: 'latency probe' });
      await probe.filter({ hasText: 'unrated' }).waitFor({ timeout: 30_000 });
      assert.equal(daemonPid(), pid, 'no second daemon was started');

      await panel.locator('.rollout-row', { hasText: 'latency probe' }).click();
      await panel.locator('.detail .detail-header', { hasText: 'latency probe' }).locator('.thumb-down').click();
      await probe.filter({ hasText: '0 (bad)' }).waitFor({ timeout: 15_000 });
      await second.screenshot({ path: path.join(SHOTS, '08-second-window.png') });
    } finally {
      await second.close();
      // The first window is the one the next tests type into: in front again, its workbench focused.
      await page.bringToFront();
    }
  });

  it('Optimize This Prompt on a string literal: APO runs, the leaderboard shows, Apply edits the file and undo restores it', async () => {
    const imported = await runCli([
      'dataset',
      'import',
      path.join(workspace, 'sums.jsonl'),
      '--name',
      'sums',
      '--store',
      storeFile(),
    ]);
    assert.equal(imported.code, 0, imported.stderr);
    const agentFile = path.join(workspace, 'sum-agent.mjs');
    const original = fs.readFileSync(agentFile, 'utf8');
    const lines = original.split('\n');
    const line = lines.findIndex((text) => text.includes(`'${SEED_PROMPT}'`));
    await openFile(page, 'sum-agent.mjs');
    await page.locator('.monaco-editor .view-lines', { hasText: 'SYSTEM_PROMPT' }).waitFor({ timeout: 15_000 });
    // The cursor inside the literal (Go to Line accepts line:column): no selection needed.
    await goToLine(page, line + 1, lines[line]!.indexOf('{a}') + 1);

    await runCommand(page, 'Lightning: Optimize This Prompt');
    const title = page.locator('.quick-input-widget .quick-input-title');
    const input = page.locator('.quick-input-widget input');
    await title.filter({ hasText: 'resource name' }).waitFor({ timeout: 30_000 });
    assert.equal(await input.inputValue(), 'system-prompt', 'the name suggested from the variable');
    await page.keyboard.press('Enter');
    await title.filter({ hasText: 'training tasks' }).waitFor({ timeout: 15_000 });
    await pickQuickItem(page, 'sums');
    await pickQuickItem(page, 'val split of sums');
    await pickQuickItem(page, 'Sum agent');
    // Advanced…: one round keeps the run short.
    await pickQuickItem(page, 'Advanced');
    await pickQuickItem(page, 'Rounds');
    await input.fill('1');
    await page.keyboard.press('Enter');
    await title.filter({ hasText: 'settings' }).waitFor({ timeout: 10_000 });
    await pickQuickItem(page, '1 rounds');
    await page.locator('.notifications-toasts', { hasText: 'optimizing "system-prompt"' }).waitFor({ timeout: 30_000 });

    // The panel follows the run live: its row, then the leaderboard with the critique behind the winner.
    await runCommand(page, 'Lightning: Show Panel');
    const run = panel.locator('.run-row', { hasText: 'system-prompt · sums' }).first();
    await run.locator('.status[title="succeeded"]').waitFor({ timeout: 120_000 });
    await run.filter({ hasText: 'val 0.50 → 1.00' }).waitFor({ timeout: 15_000 });
    const winner = panel.locator('.leaderboard .candidate').first();
    await winner.filter({ hasText: 'val 1.000' }).waitFor({ timeout: 15_000 });
    assert.ok((await panel.locator('.leaderboard .candidate').count()) >= 2, 'the seed and at least one candidate');
    await winner.locator('summary').click();
    await winner.locator('.critique', { hasText: 'digits' }).waitFor({ timeout: 5_000 });
    await panel.locator('.chart polyline.series').first().waitFor({ timeout: 5_000 });
    await shot('09-apo-leaderboard');

    // The diff with both scores, then Apply.
    await page.locator('.tab', { hasText: 'original (val 0.50) ↔ optimized (val 1.00)' }).waitFor({ timeout: 30_000 });
    await shot('10-apo-diff');
    await page.locator('.notifications-toasts .monaco-button', { hasText: 'Apply' }).first().click();
    const best = (await latestRun()).best;
    const applied = original.replace(`'${SEED_PROMPT}'`, `'${encodeLiteral(best.prompt, "'")}'`);
    assert.notEqual(applied, original);
    await page
      .locator('.notifications-toasts', { hasText: 'applied the optimized prompt' })
      .waitFor({ timeout: 15_000 });
    await page.keyboard.press('Control+S');
    await waitFor(
      () => fs.readFileSync(agentFile, 'utf8') === applied,
      'the optimized prompt saved in sum-agent.mjs',
      15_000,
    );
    await shot('11-apo-applied');

    await page.keyboard.press('Control+Z');
    await page.keyboard.press('Control+S');
    await waitFor(
      () => fs.readFileSync(agentFile, 'utf8') === original,
      'undo restored the original prompt on disk',
      15_000,
    );

    // Later, from the panel: Show Diff offers the choice again; Keep makes the best the current version.
    await runCommand(page, 'Lightning: Show Panel');
    await panel.locator('.run-detail .show-result').click();
    await page.locator('.notifications-toasts .monaco-button', { hasText: 'Keep as Resource Version' }).first().click();
    await page
      .locator('.notifications-toasts', { hasText: `version ${best.version} is now the current version` })
      .waitFor({ timeout: 15_000 });
    const kept = await runCli(['resource', 'get', 'system-prompt', '--json', '--store', storeFile()]);
    assert.equal(kept.code, 0, kept.stderr);
    assert.deepEqual(
      resourceFields(JSON.parse(kept.stdout) as { resource: { version: number; current: boolean; value: string } }),
      { version: best.version, current: true, value: best.prompt },
    );
  });

  it('groups the list by run: own runs first, the APO run one collapsed row named by its label, its batches inside, one count with the status bar', () =>
    session.withDaemon((client) => checkRunsGrouped({ page, panel, client, shot })));

  it('past the newest 100 runs, a last row counts the runs and rollouts left out and shows them', () =>
    session.withDaemon((client) => checkRunsLeftOut({ page, panel, client, shot })));

  it('an agent that throws under Debug with Lightning: its rollout fails with the exception and its last output lines, in the row, the tab and `lightning show`', async () => {
    await runCommand(page, 'Lightning: Show Panel');
    await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Crashing agent');
    // The own runs are at the top of the list (virtualized: a row exists once in view); the test before scrolled down.
    await panel
      .locator('.rollout-list')
      .evaluate((list) => void ((list as unknown as { scrollTop: number }).scrollTop = 0));
    const row = panel.locator('.rollout-row', { hasText: 'Crashing agent' }).first();
    // Whether js-debug pauses on an uncaught exception is the user's setting: Continue lets the agent end if it does.
    await waitFor(
      async () => {
        if ((await row.locator('.status[title="failed"]').count()) > 0) return true;
        await continueIfPaused(page);
        return false;
      },
      'the crashed rollout failed',
      90_000,
    );
    const id = (await row.getAttribute('data-rollout-id'))!;
    const detail = await show(id);
    const error = detail.rollout.error ?? '';
    assert.equal(detail.rollout.status, 'failed');
    assert.equal(detail.rollout.exitCode, 1);
    assert.equal(failureHeadline(error), 'Error: no forecast for Oslo (exited with code 1)', error);
    assert.match(failureOutput(error), /crash-agent\.mjs:\d+/, 'the stack, from the last output lines');
    assert.match(failureOutput(error), /asked the model: /, "the agent's own output before it threw");
    assert.ok(!error.includes(CRASH_KEY), 'the key the agent printed is redacted');
    assert.equal(detail.rollout.llmCalls, 1);

    // The row says why; the tab shows the reason and the output lines; `lightning show` prints both.
    assert.equal(await row.locator('.reason').textContent(), failureHeadline(error));
    await row.click();
    const tab = await frameWith(page, `.rollout-tab[data-rollout-id="${id}"] .failure`, 60_000);
    assert.equal(await tab.locator('.failure .failure-reason').textContent(), failureHeadline(error));
    await tab.locator('.failure .failure-output summary').click();
    assert.match((await tab.locator('.failure .failure-output pre').textContent()) ?? '', /crash-agent\.mjs:\d+/);
    const shown = await runCli(['show', id, '--store', storeFile()]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.ok(shown.stdout.includes('Error: no forecast for Oslo (exited with code 1)'), shown.stdout);
    assert.match(shown.stdout, /crash-agent\.mjs:\d+/);
    await shot('14-crashed-agent');
  });

  it('Restart at a breakpoint (the debug toolbar): the run that ends is cancelled with its one call, the relaunched program a rollout of its own', async () => {
    const label = 'Weather agent (recorded)';
    const recorded = (): Promise<RolloutDetail['rollout'][]> =>
      session.withDaemon(async (client) => (await client.request('listRollouts', { label, limit: 20 })).items);
    const calls = (): number =>
      upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
    const earlier = new Set((await recorded()).map((rollout) => rollout.id));
    await runCommandAndPick(page, 'Debug: Select and Start Debugging', label);
    await page.locator('.debug-toolbar .codicon-debug-continue').waitFor({ timeout: 60_000 });
    const first = calls();
    await page.locator('.debug-toolbar .codicon-debug-restart').click();
    // The relaunched program makes its first call and stops at the same breakpoint; Continue lets it end.
    const runs = await waitFor(
      async () => {
        const mine = (await recorded()).filter((rollout) => !earlier.has(rollout.id));
        if (mine.length === 2 && mine.every((rollout) => rollout.status !== 'running')) return mine;
        if (calls() > first) await continueIfPaused(page);
        return undefined;
      },
      'two rollouts, both ended',
      60_000,
    );
    const [restarted, relaunched] = runs.sort((a, b) => a.createdAt - b.createdAt);
    assert.equal(relaunched!.status, 'succeeded', relaunched!.error ?? '');
    assert.equal(restarted!.status, 'cancelled');
    assert.equal(restarted!.error, 'restarted from the debugger before the program ended');
    assert.equal(restarted!.llmCalls, 1, 'the first run keeps its one call');
    assert.equal(relaunched!.status, 'succeeded');
    assert.equal(relaunched!.exitCode, 0);
    assert.equal(relaunched!.llmCalls, 2, "the relaunched program's calls are its own, none late");
    await shot('15-debug-restart');
  });

  /** The result of the latest training run, from the daemon. */
  function latestRun(): Promise<{ best: { prompt: string; version: number } }> {
    return session.withDaemon(async (client) => {
      const [latest] = (await client.request('listTrainingRuns', { limit: 1 })).items;
      return latest!.result as { best: { prompt: string; version: number } };
    });
  }
});
