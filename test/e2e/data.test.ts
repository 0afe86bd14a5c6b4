/**
 * The editor's data features in a real VS Code (code-server) in a real browser (chromium): a
 * tasks.jsonl imported with Lightning: Import Dataset (and a bad one refused, naming its line) shows
 * in the panel's Datasets section; Lightning: Run Dataset runs it with a launch configuration — a
 * Node agent on the real `openai` SDK, without the debugger — against a scripted upstream, and the
 * batch's rollouts show in the panel; Lightning: Score Rollouts scores them with a rules file; a
 * reward's source and reason show, and accepting it adds a human row; the Training view shows each
 * LLM call's credit and advantage; cancelling a run stops its agents. Its own workbench (see
 * e2eSession.ts). Screenshots go to test-results/e2e/data-*.png.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import { answerInputBox, openFile, pickQuickItem, runCommand, runCommandAndPick } from '../helpers/codeServer';
import { runCli } from '../helpers/daemon';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import type { ScriptedUpstream } from '../helpers/scriptedUpstream';
import { waitFor } from '../helpers/tmp';

describe(
  'datasets, batch runs, automatic rewards and the Training view in VS Code (code-server + chromium)',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let workspace: string;
    let upstream: ScriptedUpstream;
    let page: Page;
    let panel: FrameLocator;
    const shot = (name: string): Promise<Buffer> => session.shot(name);
    const storeFile = (): string => session.storeFile;

    before(async () => {
      session = await startE2eSession();
      ({ workspace, upstream, page, panel } = session);
    });

    after(() => session?.close('extension-data'));

    const toast = (text: string | RegExp) =>
      page.locator('.notifications-toasts .notification-toast', { hasText: text }).first();

    it('Import Dataset: the active tasks.jsonl becomes a dataset shown in the panel; a bad file names its line', async () => {
      await openFile(page, 'bad-tasks.jsonl');
      await runCommand(page, 'Lightning: Import Dataset');
      await answerInputBox(page, 'Import bad-tasks.jsonl as a dataset');
      await toast('line 2: not valid JSON').waitFor({ timeout: 30_000 });

      await openFile(page, 'tasks.jsonl');
      await runCommand(page, 'Lightning: Import Dataset');
      await answerInputBox(page, 'Import tasks.jsonl as a dataset');
      await toast('imported 2 tasks as dataset tasks').waitFor({ timeout: 30_000 });
      await runCommand(page, 'Lightning: Show Panel');
      await panel.locator('.datasets summary', { hasText: 'Datasets (1)' }).click({ timeout: 15_000 });
      await panel
        .locator('.dataset-row', { hasText: 'tasks' })
        .filter({ hasText: '2 tasks (2 train)' })
        .waitFor({ timeout: 15_000 });
      const listed = await runCli(['dataset', 'list', '--json', '--store', storeFile()]);
      assert.deepEqual(
        (JSON.parse(listed.stdout) as { items: Array<{ name: string; taskCount: number }> }).items.map((d) => [
          d.name,
          d.taskCount,
        ]),
        [['tasks', 2]],
        'the bad file imported nothing',
      );
      await shot('data-1-dataset-imported');
    });

    it('Run Dataset: a launch configuration without the debugger, 2 samples per task, progress then a summary; the batch shows in the panel', async () => {
      const calls = upstream.requests.length;
      await runCommandAndPick(page, 'Lightning: Run Dataset', '2 tasks');
      await pickQuickItem(page, 'Weather agent');
      await answerInputBox(page, 'rollouts per task', '2');
      await answerInputBox(page, 'agents running at once');
      await toast(/finished: 4 rollouts over 2 tasks · 100% succeeded/).waitFor({ timeout: 120_000 });
      await shot('data-2-dataset-run');
      await panel.locator('.scope', { hasText: 'Showing batch' }).waitFor({ timeout: 15_000 });
      await waitFor(
        async () => (await panel.locator('.rollout-row').count()) === 4,
        "the batch's 4 rollouts in the panel",
        15_000,
      );
      // Each rollout asked the agent's question about its own task (LIGHTNING_TASK).
      const questions = upstream.requests.slice(calls).map((request) => JSON.stringify(request.body?.messages ?? ''));
      assert.equal(
        questions.filter((q) => q.includes('weather in Oslo')).length,
        4,
        'two rollouts of oslo, two LLM calls each',
      );
    });

    it('Score Rollouts with a rules file: every reward shows its source and reason; accepting one adds a human row', async () => {
      await runCommandAndPick(page, 'Lightning: Score Rollouts', 'rewards.json');
      await pickQuickItem(page, 'A dataset');
      await pickQuickItem(page, '2 tasks');
      await toast('scored: 4 rollout(s) scored, 0 without a score, 0 source error(s)').waitFor({ timeout: 60_000 });

      // The row clicked is the row that shows the selection: the list updates its rows in place (a row replaced between
      // press and release would lose the click).
      const clicked = await panel.locator('.rollout-row').first().elementHandle();
      await clicked.click();
      const detail = panel.locator('.detail');
      assert.deepEqual(
        await clicked.evaluate((element) => {
          const row = element as unknown as { isConnected: boolean; classList: { contains(name: string): boolean } };
          return [row.isConnected, row.classList.contains('selected')];
        }),
        [true, true],
        'the clicked row stayed in the document and shows the selection',
      );
      const combined = detail.locator('.reward-row.source-rule', { hasText: 'reward · rule' }).first();
      await combined.waitFor({ timeout: 15_000 });
      await detail
        .locator('.reward-row.source-rule', { hasText: 'answer · rule' })
        .locator('.reward-reason')
        .waitFor({ timeout: 5_000 });
      const id = (await detail.getAttribute('data-rollout-id'))!;
      const rewardId = Number(await combined.getAttribute('data-reward-id'));
      await combined.locator('.accept-reward').click();
      await detail
        .locator('.reward-row.source-human', { hasText: `accepts rule reward #${rewardId}` })
        .waitFor({ timeout: 15_000 });
      await detail.locator(`.reward-row[data-reward-id="${rewardId}"] .verdict-accept`).waitFor({ timeout: 5_000 });
      await shot('data-3-scored-and-accepted');
      const { rewards, rollout } = await session.show(id);
      assert.deepEqual(
        rollout.source.kind === 'command' ? rollout.source.argv : rollout.source,
        ['node', path.join(workspace, 'agent.mjs')],
        "the launch configuration's command, run by the batch runner, not in a debug session",
      );
      const automatic = rewards.find((reward) => reward.id === rewardId)!;
      const human = rewards.filter((reward) => reward.source === 'human');
      assert.deepEqual(
        human.map((reward) => [reward.name, reward.value, reward.reason]),
        [['reward', automatic.value, `accepts rule reward #${rewardId}`]],
      );
      assert.ok(
        rewards.some((reward) => reward.source === 'rule' && reward.name === 'answer' && reward.reason),
        'the rule gave its reason',
      );
    });

    it('Training view: each LLM call of the rollout in training, with its credited reward and group advantage', async () => {
      const detail = panel.locator('.detail');
      await detail.locator('.show-training').click();
      const view = detail.locator('.training-view');
      await view
        .locator('.training-status.included', { hasText: 'In training: episode reward' })
        .waitFor({ timeout: 15_000 });
      assert.equal(await view.locator('.training-call.included').count(), 2);
      await view
        .locator('.facts', { hasText: /Group: batch batch-\w+, task \w+ · 2 rewarded/ })
        .waitFor({ timeout: 5_000 });
      await view.locator('.training-call', { hasText: 'advantage 0' }).first().waitFor({ timeout: 5_000 });
      await view.scrollIntoViewIfNeeded();
      await shot('data-4-training-view');
    });

    it('Run Dataset is cancelled from its notification: the agents are stopped and the rollouts marked cancelled', async () => {
      await runCommandAndPick(page, 'Lightning: Run Dataset', '2 tasks');
      await pickQuickItem(page, 'Weather agent (hangs)');
      await answerInputBox(page, 'rollouts per task');
      await answerInputBox(page, 'agents running at once');
      // Both agents are waiting on an upstream that never answers.
      await waitFor(
        async () => (await panel.locator('.rollout-row .status[title="running"]').count()) === 2,
        'two running rollouts of the new batch',
        60_000,
      ).catch(async (error: unknown) => {
        await shot('data-5-not-running');
        throw error;
      });
      const agents = (): number[] =>
        fs
          .readdirSync('/proc')
          .filter((pid) => /^\d+$/.test(pid))
          .filter((pid) => {
            try {
              // `node …/agent.mjs` (the CLI's own command line names it too, after `--`).
              return (
                fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[1] === path.join(workspace, 'agent.mjs')
              );
            } catch {
              return false;
            }
          })
          .map(Number);
      // A rollout is running from its spawn: its process may still be exec'ing the agent.
      await waitFor(() => agents().length === 2, 'both agent processes', 15_000);
      await toast('running tasks with Weather agent (hangs)').locator('.monaco-button', { hasText: 'Cancel' }).click();
      await toast(/batch batch-\w+ cancelled: 2 rollouts/).waitFor({ timeout: 30_000 });
      await waitFor(
        async () => (await panel.locator('.rollout-row .status[title="cancelled"]').count()) === 2,
        "the batch's rollouts cancelled",
        15_000,
      );
      await waitFor(() => agents().length === 0, 'no agent left running', 15_000);
      await shot('data-5-dataset-run-cancelled');
    });
  },
);
