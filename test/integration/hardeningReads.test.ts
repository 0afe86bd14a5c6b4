/**
 * Answers the daemon and the CLI read whole are read with a cap counted as the bytes arrive (issue 28): the policy
 * server's answer to a translated Anthropic call, and the proxy's answer to APO's optimizer calls.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { OptimizerLlm } from '../../trainer-daemon/apo/llm';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { post } from '../helpers/http';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';

const MiB = 1024 * 1024;

/**
 * A chat-completions server whose one answer is valid JSON of `bytes` bytes, sent in 64 KiB writes; counts what it
 * could send.
 */
function hugeAnswerServer(bytes: number): Promise<{ url: string; sent: () => number; close(): Promise<void> }> {
  let sent = 0;
  const server = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const head =
        '{"id":"huge","object":"chat.completion","model":"policy","choices":[{"index":0,"message":{"role":"assistant","content":"';
      const tail = '"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}';
      response.writeHead(200, { 'content-type': 'application/json' });
      response.write(head);
      const chunk = 'x'.repeat(64 * 1024);
      const more = (): void => {
        while (sent < bytes && !response.destroyed) {
          sent += chunk.length;
          if (!response.write(chunk)) return void response.once('drain', more);
        }
        if (!response.destroyed) response.end(tail);
      };
      more();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`,
        sent: () => sent,
        close: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      }),
    ),
  );
}

test('a policy server answering a translated call past the cap: 502 naming the limit, the call recorded as cut by it', async (t) => {
  const policy = await hugeAnswerServer(256 * MiB);
  t.after(() => policy.close());
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), [], {
    LIGHTNING_MAX_UPSTREAM_BODY_BYTES: String(MiB),
  });
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  // A rollout answered by a chat-completions-only engine (the trainer's policy): its Anthropic calls are translated.
  const { rollout, url } = await client.request('startAgentRun', { upstream: policy.url, tokenIds: true });
  const response = await post(
    `${url}/v1/messages`,
    JSON.stringify({ model: 'policy', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
  );
  assert.equal(response.status, 502, response.body);
  const body = JSON.parse(response.body) as { type: string; error: { message: string } };
  assert.equal(body.type, 'error', 'in the Anthropic shape the agent’s SDK reads');
  assert.match(
    body.error.message,
    /over the 1048576-byte limit for a non-streamed answer \(LIGHTNING_MAX_UPSTREAM_BODY_BYTES\)/,
  );
  // Reading stopped at the cap: the server could not send its 256 MiB (it is stopped by backpressure, then closed).
  assert.ok(policy.sent() < 64 * MiB, `the daemon stopped reading (${policy.sent()} bytes sent)`);
  const span = await waitFor(
    async () => (await client.request('getRollout', { id: rollout.id })).spans[0],
    'the call’s record',
  );
  assert.equal(span.attributes['lightning.outcome'], 'truncated');
  assert.equal(span.attributes['lightning.truncated_by'], 'response_body');
  assert.match(span.statusMessage ?? '', /1048576-byte limit/);
  assert.equal((await fetch(`${daemon.ready.url}/health`)).status, 200);
});

test('APO: an optimizer answer past the cap fails that attempt with an error naming the limit, recorded on its rollout', async (t) => {
  const upstream = await startScriptedUpstream({ chat: () => 'y'.repeat(256 * 1024) });
  t.after(() => upstream.close());
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const llm = new OptimizerLlm({
    client,
    runId: 'apo-cap',
    upstream: null,
    apiKey: undefined,
    temperature: 0,
    seed: 1,
    budgetCalls: 4,
    attempts: 2,
    maxAnswerBytes: 64 * 1024,
  });
  await assert.rejects(
    llm.ask('critique', 'm', [{ role: 'user', content: 'critique this' }], (answer) => answer),
    /answered with more than 65536 bytes \(LIGHTNING_MAX_UPSTREAM_BODY_BYTES\)/,
  );
  assert.equal(llm.callsUsed, 2, 'each attempt was counted');
  const { items: rollouts } = await client.request('listRollouts', {});
  const optimizer = rollouts.filter((r) => r.mode === 'optimizer');
  assert.equal(optimizer.length, 2);
  for (const rollout of optimizer) {
    assert.equal(rollout.status, 'failed');
    assert.match(rollout.error ?? '', /more than 65536 bytes/);
  }
});
