/**
 * Connection slots are shared fairly (issue 28): a slow-loris that keeps re-opening connections to hold the daemon's
 * connection cap never keeps out an agent with its rollout key, nor the editor's RPC.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { REPO_ROOT, startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

/** The slow-loris program (test/fixtures/slow-loris.mjs): how many of its connections the daemon closed so far. */
function slowLoris(port: number, width: number): { closed: () => number; stop(): void } {
  const child = spawn(
    process.execPath,
    [path.join(REPO_ROOT, 'test/fixtures/slow-loris.mjs'), String(port), String(width)],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  let closed = 0;
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const count = /^closed (\d+)$/.exec(line);
    if (count) closed = Number(count[1]);
  });
  return { closed: () => closed, stop: () => child.kill() };
}

/** One request on a connection of its own (no keep-alive reuse): the status, or the error that kept it out. */
function probe(url: string, method: string, body?: string): Promise<number | string> {
  return new Promise((resolve) => {
    const request = http.request(
      url,
      {
        method,
        agent: false,
        timeout: 10_000,
        headers: body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {},
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
        response.on('error', (error) => resolve(error.message));
      },
    );
    request.on('timeout', () => request.destroy(new Error('no answer in 10 s')));
    request.on('error', (error) => resolve(error.message));
    request.end(body);
  });
}

test('a slow-loris holding the connection cap never keeps out a keyed agent or the RPC: 30/30 each', async (t) => {
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), [], {
    LIGHTNING_MAX_CONNECTIONS: '32',
    SLOTS_DEBUG: '1',
  });
  t.after(() => daemon.stop());
  const admin = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => admin.dispose());
  const { url } = await admin.request('startAgentRun', {});
  const port = Number(new URL(daemon.ready.url).port);

  const loris = slowLoris(port, 48);
  t.after(() => loris.stop());
  // The cap is full: the daemon has started closing (or refusing) the slow-loris's connections.
  await waitFor(() => loris.closed() >= 48, 'the slow-loris to fill the connection cap', 15_000);

  const agent: Array<number | string> = [];
  const rpc: Array<string> = [];
  for (let i = 0; i < 30; i += 1) {
    agent.push(
      i % 2 === 0
        ? await probe(`${url}/reward`, 'POST', JSON.stringify({ value: i }))
        : await probe(`${url}/resources`, 'GET'),
    );
    try {
      const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
      try {
        rpc.push(((await client.request('getStats', {})).schemaVersion > 0).toString());
      } finally {
        client.dispose();
      }
    } catch (error) {
      rpc.push(error instanceof Error ? error.message : String(error));
    }
  }
  const failed = agent.filter((status) => status !== 200);
  assert.deepEqual(failed, [], `the keyed agent's calls that failed: ${failed.length} of 30`);
  const rpcFailed = rpc.filter((outcome) => outcome !== 'true');
  assert.deepEqual(rpcFailed, [], `the RPC connections that failed: ${rpcFailed.length} of 30`);
  assert.ok(loris.closed() > 48, 'the slow-loris kept re-opening throughout');
  // The agent's rewards were all stored (the writes went through, not just the reads).
  const stats = await admin.request('getStats', {});
  assert.ok(stats.schemaVersion > 0);
});
