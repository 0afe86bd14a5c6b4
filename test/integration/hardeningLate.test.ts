/**
 * Writes that reach a rollout after it ended (issue 28): an agent's `/reward` racing the end is refused (409, naming
 * why), and a call whose answer comes after the end is kept but marked late, left out of training.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { spanOutcome } from '../../trainer-daemon/protocol/outcome';
import { startDaemon } from '../helpers/daemon';
import { post } from '../helpers/http';
import { tempDir, waitFor } from '../helpers/tmp';

/** An upstream whose answers wait for `release()`. */
function gatedUpstream(): Promise<{ url: string; waiting: () => number; release(): void; close(): Promise<void> }> {
  const held: Array<() => void> = [];
  const server = http.createServer((request, response) => {
    request.resume();
    request.on('end', () =>
      held.push(() => {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify({
            id: 'late-answer',
            object: 'chat.completion',
            model: 'm',
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          }),
        );
      }),
    );
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`,
        waiting: () => held.length,
        release: () => held.splice(0).forEach((answer) => answer()),
        close: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      }),
    ),
  );
}

test('after a rollout ended: a racing /reward is a 409 naming why; an in-flight call is kept, marked late, not trained', async (t) => {
  const upstream = await gatedUpstream();
  t.after(() => upstream.close());
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { rollout, url } = await client.request('startAgentRun', {});

  // Both requests are past the key check (the rollout runs) when it ends.
  const call = post(
    `${url}/v1/chat/completions`,
    JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
  );
  await waitFor(() => upstream.waiting() === 1, 'the call waiting upstream');
  const body = JSON.stringify({ value: 1 });
  const reward = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const request = http.request(
      `${url}/reward`,
      { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': body.length } },
      (response) => {
        let text = '';
        response
          .setEncoding('utf8')
          .on('data', (chunk: string) => (text += chunk))
          .on('end', () => resolve({ status: response.statusCode ?? 0, text }));
      },
    );
    request.on('error', reject);
    request.write(body.slice(0, 3));
    // The rest after the end (half a second for the daemon to take the request's headers, and its key).
    setTimeout(
      () =>
        void client
          .request('transitionRollout', { id: rollout.id, to: 'succeeded' })
          .then(() => request.end(body.slice(3)), reject),
      500,
    );
  });

  const refused = await reward;
  assert.equal(refused.status, 409, refused.text);
  assert.match(refused.text, /has ended \(succeeded\): an agent's reward counts only while its rollout runs/);
  upstream.release();
  const answered = await call;
  assert.equal(answered.status, 200, answered.body);

  const detail = await waitFor(async () => {
    const found = await client.request('getRollout', { id: rollout.id });
    return found.spans.length === 1 ? found : undefined;
  }, 'the late call recorded');
  assert.equal(detail.rewards.length, 0, 'no reward was stored after the end');
  const span = detail.spans[0]!;
  assert.match(span.attributes['lightning.late'] as string, /the rollout had ended \(succeeded\)/);
  assert.deepEqual(spanOutcome(span), { kind: 'truncated', limit: 'rollout_ended' }, 'left out of training');
});
