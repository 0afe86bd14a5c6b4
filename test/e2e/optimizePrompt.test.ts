/**
 * Optimize This Prompt in a real VS Code (code-server) in a real browser (chromium): in a fixture
 * workspace whose Node agent (the real `openai` SDK) takes its prompt from a string literal, the
 * cursor in the literal → the command's quick picks (Advanced… included) → an APO run against a
 * scripted upstream whose answers depend on the prompt → the run and its leaderboard (with the
 * critique behind the winner) live in the panel → the diff with both scores → Apply, saved to disk,
 * undone → Show Diff from the panel → Keep as Resource Version. Its own workbench: the suite in
 * editor.test.ts already fills its time limit. Screenshots go to test-results/e2e/.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import { CRITIQUE_SYSTEM, EDIT_SYSTEM } from '../../trainer-daemon/apo/prompts';
import { encodeLiteral } from '../../trainer-daemon/protocol';
import { findDaemon } from '../../trainer-daemon/protocol/discovery';
import { RpcClient } from '../../trainer-daemon/rpc/client';
import { script as apoScript, SEED_PROMPT } from '../helpers/apo';
import { e2eUnavailable, e2eWorkspace, keepExtensionLogs, openWorkbench, panelFrame, pickQuickItem, runCommand, type Workbench } from '../helpers/codeServer';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { startScriptedUpstream, type ChatScript, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { waitFor } from '../helpers/tmp';

const SHOTS = path.join(REPO_ROOT, 'test-results', 'e2e');
const unavailable = e2eUnavailable();

/**
 * The scripted upstream: the sums world of the APO tests — the agent answers in digits only when
 * its prompt asks for them; critiques suggest it; edits apply the critique.
 */
const sums = apoScript();
const chat: ChatScript = (body) => {
  const first = String((body.messages as Array<{ content?: unknown }> | undefined)?.[0]?.content ?? '');
  return first === CRITIQUE_SYSTEM || first === EDIT_SYSTEM || first.startsWith('Add the numbers') ? sums.chat(body) : undefined;
};

describe('Optimize This Prompt in VS Code (code-server + chromium)', { skip: unavailable, concurrency: false, timeout: 600_000 }, () => {
  let scratch: string;
  let workspace: string;
  let upstream: ScriptedUpstream;
  let workbench: Workbench;
  let page: Page;
  let panel: FrameLocator;
  const started = Date.now();

  const storeFile = (): string => path.join(workspace, '.lightning', 'store.db');
  const shot = (name: string): Promise<Buffer> => page.screenshot({ path: path.join(SHOTS, `${name}.png`) });

  before(async () => {
    fs.mkdirSync(SHOTS, { recursive: true });
    upstream = await startScriptedUpstream({ chat });
    ({ scratch, workspace } = e2eWorkspace(upstream.url));
    workbench = await openWorkbench(workspace, scratch);
    page = workbench.page;
    panel = panelFrame(page);
  });

  after(async () => {
    keepExtensionLogs(workbench, SHOTS, 'extension-apo');
    await workbench?.close();
    await upstream?.close();
    if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
    console.log(`# e2e (Optimize This Prompt) wall time ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });

  it('Optimize This Prompt on a string literal: APO runs, the leaderboard shows, Apply edits the file and undo restores it', async () => {
    const imported = await runCli(['dataset', 'import', path.join(workspace, 'sums.jsonl'), '--name', 'sums', '--store', storeFile()]);
    assert.equal(imported.code, 0, imported.stderr);
    const agentFile = path.join(workspace, 'sum-agent.mjs');
    const original = fs.readFileSync(agentFile, 'utf8');
    const lines = original.split('\n');
    const line = lines.findIndex((text) => text.includes(`'${SEED_PROMPT}'`));
    await runCommand(page, 'Go to File');
    await page.keyboard.type('sum-agent.mjs');
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'sum-agent.mjs' }).first().waitFor({ timeout: 15_000 });
    await page.keyboard.press('Enter');
    await page.locator('.monaco-editor .view-lines', { hasText: 'SYSTEM_PROMPT' }).waitFor({ timeout: 15_000 });
    // The cursor inside the literal (Go to Line accepts line:column): no selection needed.
    await page.keyboard.press('Control+G');
    await page.keyboard.type(`${line + 1}:${lines[line]!.indexOf('{a}') + 1}`);
    await page.keyboard.press('Enter');

    await runCommand(page, 'Lightning: Optimize This Prompt');
    const title = page.locator('.quick-input-widget .quick-input-title');
    const input = page.locator('.quick-input-widget input');
    await title.filter({ hasText: 'resource name' }).waitFor({ timeout: 15_000 });
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
    await run.click();
    await run.locator('.status[title="succeeded"]').waitFor({ timeout: 120_000 });
    await run.filter({ hasText: 'val 0.50 → 1.00' }).waitFor({ timeout: 15_000 });
    const winner = panel.locator('.leaderboard .candidate').first();
    await winner.filter({ hasText: 'val 1.000' }).waitFor({ timeout: 15_000 });
    assert.ok((await panel.locator('.leaderboard .candidate').count()) >= 2, 'the seed and at least one candidate');
    await winner.locator('summary').click();
    await winner.locator('.critique', { hasText: 'digits' }).waitFor({ timeout: 5_000 });
    await panel.locator('.chart polyline.series').first().waitFor({ timeout: 5_000 });
    await shot('apo-1-leaderboard');

    // The diff with both scores, then Apply.
    await page.locator('.tab', { hasText: 'original (val 0.50) ↔ optimized (val 1.00)' }).waitFor({ timeout: 30_000 });
    await shot('apo-2-diff');
    await page.locator('.notifications-toasts .monaco-button', { hasText: 'Apply' }).first().click();
    const best = (await latestRun()).best;
    const applied = original.replace(`'${SEED_PROMPT}'`, `'${encodeLiteral(best.prompt, "'")}'`);
    assert.notEqual(applied, original);
    await page.locator('.notifications-toasts', { hasText: 'applied the optimized prompt' }).waitFor({ timeout: 15_000 });
    await page.keyboard.press('Control+S');
    await waitFor(() => fs.readFileSync(agentFile, 'utf8') === applied, 'the optimized prompt saved in sum-agent.mjs', 15_000);
    await shot('apo-3-applied');

    await page.keyboard.press('Control+Z');
    await page.keyboard.press('Control+S');
    await waitFor(() => fs.readFileSync(agentFile, 'utf8') === original, 'undo restored the original prompt on disk', 15_000);

    // Later, from the panel: Show Diff offers the choice again; Keep makes the best the current version.
    await runCommand(page, 'Lightning: Show Panel');
    await panel.locator('.run-detail .show-result').click();
    await page.locator('.notifications-toasts .monaco-button', { hasText: 'Keep as Resource Version' }).first().click();
    await page.locator('.notifications-toasts', { hasText: `version ${best.version} is now the current version` }).waitFor({ timeout: 15_000 });
    const kept = await runCli(['resource', 'get', 'system-prompt', '--json', '--store', storeFile()]);
    assert.equal(kept.code, 0, kept.stderr);
    assert.deepEqual(pick(JSON.parse(kept.stdout) as { resource: { version: number; current: boolean; value: string } }), { version: best.version, current: true, value: best.prompt });
  });

  /** The result of the latest training run, from the daemon. */
  async function latestRun(): Promise<{ best: { prompt: string; version: number } }> {
    const daemon = findDaemon(storeFile())!;
    const client = await RpcClient.connect(daemon.info.url, daemon.token);
    try {
      const [latest] = (await client.request('listTrainingRuns', { limit: 1 })).items;
      return latest!.result as { best: { prompt: string; version: number } };
    } finally {
      client.dispose();
    }
  }
});

const pick = ({ resource }: { resource: { version: number; current: boolean; value: string } }): unknown => ({ version: resource.version, current: resource.current, value: resource.value });
