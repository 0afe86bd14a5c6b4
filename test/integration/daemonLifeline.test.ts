/**
 * `lightning serve --stop-when-alone`, as the extension starts the daemon: stdin is the starter's lifeline. When the
 * window that started the daemon closes (its client goes, stdin closes, its ends of stdout and stderr close), the
 * daemon keeps serving another window still connected — its log lines now fail with EPIPE, which must not kill it —
 * and stops by itself once the last client has gone. Without the flag, stdin closing changes nothing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

/** Longer than the daemon's grace for a client to come back (ALONE_GRACE_MS, 1 s). */
const PAST_GRACE_MS = 2_000;

function running(daemon: RunningDaemon): boolean {
  return daemon.process.exitCode === null && daemon.process.signalCode === null;
}

/** What the extension's supervisor does when its window closes (`letGo`). */
function starterGoes(daemon: RunningDaemon, starter: RpcClient): void {
  starter.dispose();
  daemon.process.stdin?.end();
  daemon.process.stdout?.destroy();
  daemon.process.stderr?.destroy();
}

async function exitsWithin(daemon: RunningDaemon, ms: number): Promise<number | string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the daemon still runs ${ms} ms later`)), ms);
  });
  try {
    return await Promise.race([daemon.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

test('the window that started the daemon closes: another window keeps it (training state, logs failing with EPIPE); it stops once that one goes', async (t) => {
  const store = path.join(tempDir(t), '.lightning', 'store.db');
  const daemon = await startDaemon(store, ['--stop-when-alone'], {}, 'pipe');
  t.after(() => daemon.stop());
  const starter = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  const other = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => other.dispose());
  const rollout = await other.request('createRollout', { mode: 'debug' });
  await other.request('startAgentRun', { rolloutId: rollout.id, upstream: null, tokenIds: false });

  starterGoes(daemon, starter);
  await new Promise((resolve) => setTimeout(resolve, PAST_GRACE_MS));
  assert.ok(running(daemon), 'the daemon stopped with its starter although another window was connected');
  // A refused connection makes the daemon log a warning to the stderr nobody reads any more.
  await assert.rejects(RpcClient.connect(daemon.ready.url, 'not-the-token'));
  const info = await other.request('daemonInfo', {});
  assert.equal(info.pid, daemon.ready.pid);
  assert.equal((await other.request('getRollout', { id: rollout.id })).rollout.status, 'running', 'its rollout kept');
  assert.ok(running(daemon));

  other.dispose();
  assert.equal(await exitsWithin(daemon, 15_000), 0, 'it stops cleanly once the last client has gone');
  assert.ok(!fs.existsSync(path.join(path.dirname(store), 'daemon.json')), 'its discovery file removed');
});

test('the starter goes with nobody else connected: the daemon stops (also when the starter only closes stdin)', async (t) => {
  const store = path.join(tempDir(t), '.lightning', 'store.db');
  const daemon = await startDaemon(store, ['--stop-when-alone'], {}, 'pipe');
  t.after(() => daemon.stop());
  const starter = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  starterGoes(daemon, starter);
  assert.equal(await exitsWithin(daemon, 15_000), 0);

  const again = await startDaemon(store, ['--stop-when-alone'], {}, 'pipe');
  t.after(() => again.stop());
  again.process.stdin?.end();
  assert.equal(await exitsWithin(again, 15_000), 0, 'a starter that dies before connecting leaves no daemon behind');
});

test('without --stop-when-alone stdin means nothing: `lightning serve < /dev/null` keeps serving', async (t) => {
  const store = path.join(tempDir(t), '.lightning', 'store.db');
  const daemon = await startDaemon(store, [], {}, 'pipe');
  t.after(() => daemon.stop());
  daemon.process.stdin?.end();
  await new Promise((resolve) => setTimeout(resolve, PAST_GRACE_MS));
  assert.ok(running(daemon));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  assert.equal((await client.request('daemonInfo', {})).pid, daemon.ready.pid);
});
