/**
 * One end-to-end session: the fixture workspace copied to a scratch folder (with this repository's
 * node_modules, so its agent imports the real `openai`), a scripted upstream as the daemon's
 * upstream, and code-server + chromium opened on it. Each e2e file starts its own, so each stays
 * well within the test runner's per-file time limit; screenshots and the extension's logs go to
 * test-results/e2e/.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FrameLocator, Page } from 'playwright-core';
import type { RolloutDetail, TrainingRunSummary } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { findDaemon } from '../../trainer-daemon/protocol/node/discovery';
import { openWorkbench, panelFrame, type Workbench, type WorkbenchOptions } from './codeServer';
import { REPO_ROOT, runCli } from './daemon';
import { startScriptedUpstream, type ScriptedUpstream, type ScriptedUpstreamOptions } from './scriptedUpstream';

export const SHOTS = path.join(REPO_ROOT, 'test-results', 'e2e');
const FIXTURE = path.join(REPO_ROOT, 'test', 'fixtures', 'e2e-workspace');

export interface E2eSession {
  readonly workspace: string;
  readonly upstream: ScriptedUpstream;
  readonly workbench: Workbench;
  readonly page: Page;
  /** The Lightning side panel's frame. */
  readonly panel: FrameLocator;
  readonly storeFile: string;
  shot(name: string): Promise<Buffer>;
  /** `lightning show ID --json` on the workspace's store. */
  show(id: string): Promise<RolloutDetail>;
  /** A training run as `lightning train --list --json` lists it. */
  showRun(id: string): Promise<{ run: TrainingRunSummary }>;
  /** `fn` with an RPC client of the workspace's daemon (found as the extension finds it), disposed after. */
  withDaemon<T>(fn: (client: RpcClient) => Promise<T>): Promise<T>;
  /** Keeps the extension's logs as `<logPrefix>-N.log` beside the screenshots, then stops everything. */
  close(logPrefix: string): Promise<void>;
}

/**
 * `upstream`: the scripted upstream's options (e.g. a chat script for a file's own agent); `prepare`:
 * adds to the workspace (files, launch configurations, an imported dataset) before the editor opens it;
 * `workbenchOptions`: which editor, and the extension from a .vsix instead of the checkout.
 */
export async function startE2eSession(
  upstreamOptions: ScriptedUpstreamOptions = {},
  prepare?: (workspace: string, storeFile: string) => Promise<void>,
  workbenchOptions: WorkbenchOptions = {},
): Promise<E2eSession> {
  const started = Date.now();
  fs.mkdirSync(SHOTS, { recursive: true });
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-e2e-'));
  const workspace = path.join(scratch, 'workspace');
  fs.cpSync(FIXTURE, workspace, { recursive: true });
  fs.symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(workspace, 'node_modules'));
  const upstream = await startScriptedUpstream(upstreamOptions);
  fs.writeFileSync(
    path.join(workspace, '.vscode', 'settings.json'),
    JSON.stringify({ 'lightning.upstreamBaseUrl': upstream.url }),
  );
  const storeFile = path.join(workspace, '.lightning', 'store.db');
  let workbench: Workbench;
  try {
    await prepare?.(workspace, storeFile);
    workbench = await openWorkbench(workspace, scratch, workbenchOptions);
  } catch (error) {
    await upstream.close();
    fs.rmSync(scratch, { recursive: true, force: true });
    throw error;
  }
  const page = workbench.page;
  return {
    workspace,
    upstream,
    workbench,
    page,
    panel: panelFrame(page),
    storeFile,
    shot: (name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`) }),
    show: async (id) => {
      const result = await runCli(['show', id, '--json', '--store', storeFile]);
      assert.equal(result.code, 0, result.stderr);
      return JSON.parse(result.stdout) as RolloutDetail;
    },
    showRun: async (id) => {
      const result = await runCli(['train', '--list', '--json', '--store', storeFile]);
      assert.equal(result.code, 0, result.stderr);
      const run = (JSON.parse(result.stdout) as TrainingRunSummary[]).find((listed) => listed.id === id);
      assert.ok(run, `training run ${id} is listed`);
      return { run };
    },
    withDaemon: async (fn) => {
      const daemon = findDaemon(storeFile);
      assert.ok(daemon, `a daemon announced itself for ${storeFile}`);
      const client = await RpcClient.connect(daemon.info.url, daemon.token);
      try {
        return await fn(client);
      } finally {
        client.dispose();
      }
    },
    close: async (logPrefix) => {
      // The extension's logs (its LogOutputChannel, one per window) are kept beside the screenshots.
      const logs = fs
        .readdirSync(workbench.userDataDir, { recursive: true, encoding: 'utf8' })
        .filter((file) => file.endsWith('Lightning.log'));
      logs.forEach((file, index) =>
        fs.copyFileSync(path.join(workbench.userDataDir, file), path.join(SHOTS, `${logPrefix}-${index + 1}.log`)),
      );
      await workbench.close();
      await upstream.close();
      fs.rmSync(scratch, { recursive: true, force: true });
      console.log(
        `# e2e wall time ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${path.relative(REPO_ROOT, SHOTS)}/`,
      );
    },
  };
}
