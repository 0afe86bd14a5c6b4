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
import type { DaemonError } from '../../trainer-daemon/protocol/errors';
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

/** A daemon whose upstream is a gated one, and a client of it; all closed after the test. */
async function daemonWithGatedUpstream(
  t: Parameters<typeof tempDir>[0],
): Promise<{ upstream: Awaited<ReturnType<typeof gatedUpstream>>; client: RpcClient }> {
  const upstream = await gatedUpstream();
  t.after(() => upstream.close());
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  return { upstream, client };
}

test('after a rollout ended: a racing /reward is a 409 naming why; an in-flight call is kept, marked late, not trained', async (t) => {
  const { upstream, client } = await daemonWithGatedUpstream(t);
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

test("a program relaunched with an ended rollout's URL (a debug restart): its key given to a new rollout records it there; a key still open is refused", async (t) => {
  const { upstream, client } = await daemonWithGatedUpstream(t);
  /** A call through the URL; one that reaches the upstream is answered there. */
  const ask = async (reachesUpstream = true): Promise<number> => {
    const answer = post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
    if (reachesUpstream) {
      await waitFor(() => upstream.waiting() > 0, 'the call upstream');
      upstream.release();
    }
    return (await answer).status;
  };
  const first = await client.request('startAgentRun', { label: 'agent' });
  const { url } = first;
  const key = /\/r\/([^/]+)$/.exec(url)![1]!;
  assert.equal(await ask(), 200);

  await assert.rejects(
    client.request('startAgentRun', { label: 'agent', key }),
    (error: DaemonError) => error.kind === 'conflict' && /still open/.test(error.message),
    'the key of a running rollout is not given again',
  );
  await client.request('transitionRollout', { id: first.rollout.id, to: 'cancelled' });
  assert.equal(await ask(false), 404, "an ended rollout's key opens nothing");

  const second = await client.request('startAgentRun', { label: 'agent', key });
  assert.notEqual(second.rollout.id, first.rollout.id);
  assert.equal(second.url, url, 'the same URL: the relaunched program keeps its environment');
  assert.equal(await ask(), 200);
  const [before, after] = await Promise.all(
    [first, second].map((run) => client.request('getRollout', { id: run.rollout.id })),
  );
  assert.equal(before!.spans.length, 1, 'the first run keeps its own call only');
  assert.equal(after!.spans.length, 1);
  assert.equal(after!.spans[0]!.attributes['lightning.late'], undefined, 'not late: its rollout runs');

  // The relaunched program's OPENAI_BASE_URL is its rollout URL: never a new rollout's upstream (the calls would loop).
  for (const upstreamUrl of [`${url}/v1`, `${url.replace('127.0.0.1', 'localhost')}/v1`])
    await assert.rejects(
      client.request('startAgentRun', { upstream: upstreamUrl }),
      (error: DaemonError) =>
        error.kind === 'invalid_input' && /own rollout URL/.test(error.message) && !error.message.includes(key),
    );
  await assert.rejects(
    client.request('startAgentRun', { providerUpstreams: { anthropic: url } }),
    (error: DaemonError) => error.kind === 'invalid_input',
  );
  await assert.rejects(
    client.request('startAgentRun', { key: 'not a key' }),
    (error: DaemonError) => error.kind === 'invalid_input' && /key must be/.test(error.message),
  );
});
