/**
 * A daemon killed with -9 while rollouts run: the next daemon comes back on the same port, an agent
 * that outlived the crash keeps its URL, `lightning run` reconnects and finishes its rollout, and a
 * rollout nobody comes back for is failed with a message saying what happened.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { CLI, startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

const AGENT = `
const fs = require('fs');
const timer = setInterval(async () => {
  if (!fs.existsSync(process.argv[1])) return;
  clearInterval(timer);
  const response = await fetch(process.env.LIGHTNING_URL + '/reward', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: 1 }) });
  process.exit(response.status === 200 ? 0 : 3);
}, 50);`;

test('kill -9 the daemon mid-rollout: same port again, lightning run finishes its rollout, an orphan is failed', async (t) => {
  const dir = tempDir(t);
  const store = path.join(dir, '.lightning', 'store.db');
  const env = { LIGHTNING_ORPHAN_GRACE_MS: '3000' };
  const first = await startDaemon(store, [], env);
  t.after(() => first.stop('SIGKILL'));
  const client = await RpcClient.connect(first.ready.url, first.ready.token);
  const orphan = await client.request('startAgentRun', { label: 'orphan' });
  const go = path.join(dir, 'go');
  const run = spawn(
    process.execPath,
    [CLI, 'run', '--store', store, '--label', 'survivor', '--', process.execPath, '-e', AGENT, go],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } },
  );
  let stderr = '';
  run.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk.toString()));
  const runExit = new Promise<number | null>((resolve) => run.once('close', resolve));
  t.after(() => run.kill('SIGKILL'));
  await waitFor(
    async () => (await client.request('listRollouts', { label: 'survivor' })).items.length === 1,
    'the run’s rollout',
  );
  client.dispose();

  first.process.kill('SIGKILL');
  await first.exited;
  const second = await startDaemon(store, [], env);
  t.after(() => second.stop());
  assert.equal(second.ready.url, first.ready.url, 'the restarted daemon is on the old port');

  fs.writeFileSync(go, '');
  assert.equal(await runExit, 0, stderr);
  const finished = JSON.parse(stderr.trim().split('\n').at(-1)!) as { status: string; reward: number | null };
  assert.deepEqual(
    [finished.status, finished.reward],
    ['succeeded', 1],
    'the agent reached the daemon through its old URL and the run finished its rollout',
  );

  const again = await RpcClient.connect(second.ready.url, second.ready.token);
  t.after(() => again.dispose());
  const failed = await waitFor(
    async () => {
      const { rollout } = await again.request('getRollout', { id: orphan.rollout.id, spans: false });
      return rollout.status === 'failed' ? rollout : undefined;
    },
    'the orphan to be failed',
    10_000,
  );
  assert.match(failed.error ?? '', /^orphaned: the daemon stopped/);
});
