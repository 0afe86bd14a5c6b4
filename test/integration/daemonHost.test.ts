/**
 * `lightning serve --host ADDRESS` (an address other machines reach; here 127.0.0.2, another loopback address,
 * so nothing leaves this machine): the agent routes listen there and the rollout URLs agents get name it; the
 * RPC stays on 127.0.0.1 only; a Host header naming anything else is refused (DNS rebinding).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { runCli, startDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

function get(host: string, port: number, pathname: string, hostHeader: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host, port, path: pathname, headers: { host: hostHeader } }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.once('error', reject);
    request.end();
  });
}

test('serve --host 127.0.0.2: agents get URLs on that address and reach the daemon there; RPC only on loopback; other Host names refused; 0.0.0.0 refused', async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  const daemon = await startDaemon(storeFile, ['--host', '127.0.0.2']);
  t.after(() => daemon.stop());
  assert.match(daemon.ready.url, /^http:\/\/127\.0\.0\.1:\d+$/, 'the ready line (and the token) stay on loopback');
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const rollout = await client.request('createRollout', { mode: 'debug' });
  const { url } = await client.request('startAgentRun', { rolloutId: rollout.id, upstream: null, tokenIds: false });
  const agent = new URL(url);
  assert.equal(agent.hostname, '127.0.0.2', url);
  const port = Number(agent.port);
  assert.equal(await get('127.0.0.2', port, '/health', agent.host), 200);
  assert.equal(await get('127.0.0.2', port, `${agent.pathname}/resources`, `evil.example:${port}`), 403);
  assert.equal(await get('127.0.0.2', port, '/health', `evil.example:${port}`), 403, 'a rebinding name is refused');
  // Either address's rollout URL as a rollout's upstream would loop back: refused.
  for (const own of [`${url}/v1`, `${daemon.ready.url}${agent.pathname}/v1`])
    await assert.rejects(client.request('startAgentRun', { upstream: own }), /this daemon's own rollout URL/, own);
  await assert.rejects(
    RpcClient.connect(`http://127.0.0.2:${port}`, daemon.ready.token),
    "no RPC on the agents' address",
  );
  // A reward the agent posts through that URL is recorded.
  const reward = await fetch(`${url}/reward`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value: 0.5 }),
  });
  assert.equal(reward.status, 200, await reward.text());
  assert.deepEqual(
    (await client.request('listRewards', { rolloutId: rollout.id })).items.map((r) => r.value),
    [0.5],
  );
  assert.match(daemon.stderr(), /agents reach this daemon beyond loopback/);
  const wildcard = await runCli(['serve', '--host', '0.0.0.0', '--store', path.join(cwd, 'other.db')], { cwd });
  assert.equal(wildcard.code, 2);
  assert.match(wildcard.stderr, /not every interface/);
});
