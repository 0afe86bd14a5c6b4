/**
 * Debug with Lightning on Python agents in VS Code (the oldest claimed, from the checkout), under the real
 * debugpy adapter. The official Python extension cannot be installed offline, so the test-only extension of
 * test/fixtures/debugpy-extension (packaged with vsce and installed as a user installs one) contributes the
 * `debugpy` debug type and starts `python -m debugpy.adapter` with the test venv's Python. The user's launch
 * configurations are plain debugpy ones; Lightning adds its environment. A breakpoint (F9) in the agent's loop
 * is hit with the first LLM call already in the panel, then with the second; after the last Continue the
 * rollout is complete, and its exit code is the one the adapter's `exited` event reported: 0 for the weather
 * agent, 3 for an agent that exits with 3 (a failed rollout). An agent that raises fails with the exception
 * and its traceback as the reason, in the panel's row, the rollout tab and `lightning show`.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import { continueIfPaused, frameWith, runCommand, runCommandAndPick, setBreakpoint } from '../helpers/codeServer';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { failureHeadline, failureOutput } from '../../trainer-daemon/protocol/failureText';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { waitFor } from '../helpers/tmp';
import { buildFixtureVsix } from '../helpers/vsix';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'stdlib_agent.py');
const BREAKPOINT_TEXT = 'message = reply["choices"][0]["message"]';

/** A Python agent that makes one LLM call, prints, and exits with 3. */
const FAILING_AGENT = `import json, os, sys, urllib.request
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", method="POST",
    data=json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "What is the weather in Oslo?"}]}).encode(),
    headers={"content-type": "application/json", "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
urllib.request.urlopen(request, timeout=30).read()
print("giving up")
sys.exit(3)
`;

/** A Python agent that makes one LLM call, prints, and raises (uncaught). */
const RAISING_AGENT = `import json, os, urllib.request
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", method="POST",
    data=json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "What is the weather in Oslo?"}]}).encode(),
    headers={"content-type": "application/json", "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
urllib.request.urlopen(request, timeout=30).read()
print("asked the model")


def forecast(city):
    raise ValueError("no forecast for " + city)


forecast("Oslo")
`;

async function prepare(workspace: string): Promise<void> {
  fs.copyFileSync(AGENT, path.join(workspace, 'weather_agent.py'));
  fs.writeFileSync(path.join(workspace, 'failing_agent.py'), FAILING_AGENT);
  fs.writeFileSync(path.join(workspace, 'raising_agent.py'), RAISING_AGENT);
  const launchFile = path.join(workspace, '.vscode', 'launch.json');
  const launch = JSON.parse(fs.readFileSync(launchFile, 'utf8')) as { configurations: unknown[] };
  launch.configurations.push(
    {
      type: 'debugpy',
      request: 'launch',
      name: 'Python weather agent',
      program: '${workspaceFolder}/weather_agent.py',
      console: 'internalConsole',
    },
    {
      type: 'debugpy',
      request: 'launch',
      name: 'Python weather agent (recorded)',
      program: '${workspaceFolder}/weather_agent.py',
      console: 'internalConsole',
      lightning: true,
    },
    {
      type: 'debugpy',
      request: 'launch',
      name: 'Python failing agent',
      program: '${workspaceFolder}/failing_agent.py',
      console: 'internalConsole',
    },
    {
      type: 'debugpy',
      request: 'launch',
      name: 'Python raising agent',
      program: '${workspaceFolder}/raising_agent.py',
      console: 'internalConsole',
    },
  );
  fs.writeFileSync(launchFile, JSON.stringify(launch, null, 2));
}

describe(
  'Debug with Lightning on Python agents, under the real debugpy adapter',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let page: Page;
    let panel: FrameLocator;

    before(async () => {
      assert.ok(
        process.env.LIGHTNING_TEST_PYTHON,
        'LIGHTNING_TEST_PYTHON (the test venv with debugpy) is set by npm test',
      );
      const debugpy = await buildFixtureVsix('debugpy-extension');
      session = await startE2eSession({}, prepare, { extensions: [debugpy] });
      ({ page, panel } = session);
    });

    after(() => session?.close('extension-python'));

    const rolloutsNamed = (name: string) => panel.locator('.rollout-row', { hasText: name });

    it('a breakpoint hits with the first LLM call recorded; after Continue the rollout has both calls, the reward and exit code 0', async () => {
      await setBreakpoint(page, session.workspace, 'weather_agent.py', BREAKPOINT_TEXT);

      await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Python weather agent');
      await page.locator('.debug-toolbar .codicon-debug-continue').waitFor({ timeout: 90_000 });
      // debugpy stopped on the breakpoint line: the editor marks it as the top stack frame.
      await page.locator('.codicon-debug-stackframe').first().waitFor({ timeout: 15_000 });
      assert.equal(
        session.upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length,
        1,
        'paused after the first LLM call',
      );

      await runCommand(page, 'Lightning: Show Panel');
      const row = rolloutsNamed('Python weather agent').first();
      await row.filter({ hasText: '1 LLM call' }).waitFor({ timeout: 30_000 });
      const id = (await row.getAttribute('data-rollout-id'))!;
      await session.shot('python-1-paused-at-breakpoint');

      // The breakpoint is in the agent's loop: Continue stops on it again after the second call, then runs to the end.
      await page.locator('.debug-toolbar .codicon-debug-continue').click();
      await row.filter({ hasText: '2 LLM calls' }).locator('.status[title="running"]').waitFor({ timeout: 60_000 });
      await waitFor(
        () => session.upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length === 2,
        'the second LLM call',
        30_000,
      );
      await page.locator('.debug-toolbar .codicon-debug-continue').click({ timeout: 30_000 });
      await row.filter({ hasText: '2 LLM calls' }).locator('.status[title="succeeded"]').waitFor({ timeout: 60_000 });
      const detail = await session.show(id);
      assert.equal(detail.rollout.status, 'succeeded');
      assert.equal(detail.rollout.exitCode, 0, "the exit code of the adapter's exited event");
      assert.equal(detail.rollout.source.kind, 'launch');
      assert.equal(detail.rollout.llmCalls, 2);
      assert.equal(detail.rollout.reward, 1, 'the agent posted its reward to LIGHTNING_URL');
      await session.shot('python-2-recorded');
    });

    it('a Python agent that exits with 3 is a failed rollout with exit code 3 and its one LLM call', async () => {
      await runCommand(page, 'Lightning: Show Panel');
      await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Python failing agent');
      const row = rolloutsNamed('Python failing agent').first();
      // debugpy stops on an uncaught SystemExit with a non-zero code (its default exception filter), as it does
      // for a user; Continue lets the agent exit.
      await row.filter({ hasText: '1 LLM call' }).locator('.status[title="running"]').waitFor({ timeout: 90_000 });
      await page.locator('.debug-toolbar .codicon-debug-continue').click({ timeout: 60_000 });
      await row.locator('.status[title="failed"]').waitFor({ timeout: 60_000 });
      const id = (await row.getAttribute('data-rollout-id'))!;
      const detail = await session.show(id);
      assert.equal(detail.rollout.status, 'failed');
      assert.equal(detail.rollout.exitCode, 3);
      assert.equal(detail.rollout.llmCalls, 1);
      await session.shot('python-3-failed');
    });

    it('a Python agent that raises: its rollout fails with the exception and the traceback, in the row, the tab and `lightning show`', async () => {
      await runCommand(page, 'Lightning: Show Panel');
      await runCommandAndPick(page, 'Lightning: Debug with Lightning', 'Python raising agent');
      const row = rolloutsNamed('Python raising agent').first();
      // debugpy stops on the uncaught exception (the editor asks it what the exception is); Continue lets it end.
      await row.filter({ hasText: '1 LLM call' }).locator('.status[title="running"]').waitFor({ timeout: 90_000 });
      await page.locator('.debug-toolbar .codicon-debug-continue').click({ timeout: 60_000 });
      await row.locator('.status[title="failed"]').waitFor({ timeout: 60_000 });
      const id = (await row.getAttribute('data-rollout-id'))!;
      const detail = await session.show(id);
      const error = detail.rollout.error ?? '';
      assert.equal(detail.rollout.exitCode, 1);
      assert.equal(failureHeadline(error), 'ValueError: no forecast for Oslo (exited with code 1)', error);
      // The traceback's last lines (debugpy's own frames come first, so its header is past the 20 kept).
      assert.match(failureOutput(error), /raising_agent\.py", line \d+, in forecast\n {4}raise ValueError/);
      assert.match(failureOutput(error), /\nValueError: no forecast for Oslo$/);

      assert.equal(await row.locator('.reason').textContent(), failureHeadline(error));
      await row.click();
      const tab = await frameWith(page, `.rollout-tab[data-rollout-id="${id}"] .failure`, 60_000);
      assert.equal(await tab.locator('.failure .failure-reason').textContent(), failureHeadline(error));
      await tab.locator('.failure .failure-output summary').click();
      assert.match((await tab.locator('.failure .failure-output pre').textContent()) ?? '', /in forecast/);
      const shown = await runCli(['show', id, '--store', session.storeFile]);
      assert.equal(shown.code, 0, shown.stderr);
      assert.ok(shown.stdout.includes('ValueError: no forecast for Oslo (exited with code 1)'), shown.stdout);
      assert.match(shown.stdout, /raise ValueError/);
      await session.shot('python-4-raised');
    });

    it('Restart at a breakpoint (debugpy: a new adapter): the run that ends is cancelled with its one call; the relaunched program is a rollout of its own with both calls and its reward', async () => {
      const label = 'Python weather agent (recorded)';
      const calls = (): number =>
        session.upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
      const before = calls();
      await runCommandAndPick(page, 'Debug: Select and Start Debugging', label);
      await page.locator('.debug-toolbar .codicon-debug-continue').waitFor({ timeout: 90_000 });
      await page.locator('.codicon-debug-stackframe').first().waitFor({ timeout: 15_000 });
      assert.equal(calls(), before + 1, 'paused after the first run’s first call');
      await page.locator('.debug-toolbar .codicon-debug-restart').click();
      await waitFor(() => calls() === before + 2, 'the relaunched program calling the model', 90_000);
      // The breakpoint is in the loop: Continue until the relaunched program has ended.
      const runs = await waitFor(
        async () => {
          const mine = await session.withDaemon(
            async (client) => (await client.request('listRollouts', { label, limit: 10 })).items,
          );
          if (mine.length === 2 && mine.every((rollout) => rollout.status !== 'running')) return mine;
          await continueIfPaused(page);
          return undefined;
        },
        'two rollouts, both ended',
        120_000,
      );
      const [restarted, relaunched] = runs.sort((a, b) => a.createdAt - b.createdAt);
      assert.equal(restarted!.status, 'cancelled');
      assert.equal(restarted!.error, 'restarted from the debugger before the program ended');
      assert.equal(restarted!.llmCalls, 1, 'the first run keeps its one call');
      assert.equal(relaunched!.status, 'succeeded', relaunched!.error ?? '');
      assert.equal(relaunched!.exitCode, 0);
      assert.equal(relaunched!.llmCalls, 2, "the relaunched program's calls are its own");
      assert.equal(relaunched!.reward, 1, 'its reward, posted to the same LIGHTNING_URL, is its own');
      await session.shot('python-5-restarted');
    });
  },
);
