/**
 * The RPC server against clients that misbehave: one that stops reading is dropped once a bound of
 * unsent bytes is passed (its buffers freed) while other clients are served on.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

test('an RPC client that stops reading is disconnected past the buffered-bytes bound; others are served on', async (t) => {
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), [], {
    LIGHTNING_RPC_MAX_BUFFERED_BYTES: String(4 * 1024 * 1024),
  });
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { rollout } = await client.request('startAgentRun', {});
  await client.request('addSpans', {
    rolloutId: rollout.id,
    spans: [
      {
        traceId: '0af7651916cd43dd8448eb211c80319c',
        spanId: 'abcdefabcdefabcd',
        name: 'big',
        category: 'other',
        startMs: 1,
        endMs: 2,
        attributes: { blob: 'x'.repeat(512 * 1024) },
      },
    ],
  });

  const slow = new WebSocket(`${daemon.ready.url.replace(/^http/, 'ws')}/rpc`, {
    headers: { authorization: `Bearer ${daemon.ready.token}` },
  });
  await new Promise((resolve, reject) => slow.once('open', resolve).once('error', reject));
  const closed = new Promise<void>((resolve) => slow.once('close', () => resolve()));
  // Stop reading: the daemon's answers pile up on its side once the socket buffers are full.
  (slow as unknown as { _socket: { pause(): void } })._socket.pause();
  for (let id = 1; id <= 200; id += 1)
    slow.send(JSON.stringify({ jsonrpc: '2.0', id, method: 'lightning/rollouts/get', params: { id: rollout.id } }));
  // Served on meanwhile, and the slow client gets dropped (resume so the close frame / FIN is seen).
  const served = await client.request('getStats', {});
  assert.ok(served.schemaVersion > 0);
  await waitFor(() => daemon.stderr().includes('dropped an RPC client'), 'the slow client to be dropped', 20_000);
  assert.match(daemon.stderr(), /dropped an RPC client.*not reading/);
  (slow as unknown as { _socket: { resume(): void } })._socket.resume();
  await closed;
  assert.equal(
    (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.id,
    rollout.id,
    'still serving',
  );
});

test('slow connections (a byte a second) are capped and timed out: they never starve other clients', async (t) => {
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), [], {
    LIGHTNING_MAX_CONNECTIONS: '24',
    LIGHTNING_HEADERS_TIMEOUT_MS: '1000',
  });
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const port = Number(new URL(daemon.ready.url).port);
  const slow: net.Socket[] = [];
  const closedBy = { server: 0 };
  for (let i = 0; i < 40; i += 1) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.on('close', () => (closedBy.server += 1));
    socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    slow.push(socket);
  }
  const drip = setInterval(() => slow.forEach((socket) => socket.writable && socket.write('X')), 200);
  t.after(() => {
    clearInterval(drip);
    slow.forEach((socket) => socket.destroy());
  });
  // The connected RPC client is served throughout; the slow ones are refused past the cap or timed out.
  assert.ok((await client.request('getStats', {})).schemaVersion > 0);
  await waitFor(() => closedBy.server === slow.length, 'every slow connection to be closed by the daemon', 15_000);
  const health = await fetch(`${daemon.ready.url}/health`);
  assert.equal(health.status, 200);
});

test('RPC: duplicate task ids and params nested 10,000 deep are -32602 naming the problem, not -32603', async (t) => {
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'));
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const task = { id: 't1', split: 'train', input: 1, expected: null };
  await assert.rejects(
    client.requestRaw('lightning/datasets/import', { name: 'd', tasks: [task, { ...task }] }),
    (error: { code: number; message: string }) =>
      error.code === -32602 && /tasks\.1\.id.*repeats task 0/.test(error.message),
  );
  // Sent as text: JSON.stringify of such a value would overflow this process's stack first.
  const raw = new WebSocket(`${daemon.ready.url.replace(/^http/, 'ws')}/rpc`, {
    headers: { authorization: `Bearer ${daemon.ready.token}` },
  });
  await new Promise((resolve, reject) => raw.once('open', resolve).once('error', reject));
  t.after(() => raw.close());
  const answer = new Promise<{ error: { code: number; message: string } }>((resolve) =>
    raw.once('message', (data) => resolve(JSON.parse(data.toString()))),
  );
  raw.send(
    `{"jsonrpc":"2.0","id":7,"method":"lightning/spans/add","params":{"rolloutId":"ro-x","spans":[${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}]}}`,
  );
  const { error } = await answer;
  assert.equal(error.code, -32602, error.message);
  assert.match(error.message, /nested deeper than 64/);
  assert.ok((await client.request('getStats', {})).schemaVersion > 0);
});

test('RPC: a request reusing the id of one not yet answered gets -32600 naming the id; the first is answered, nothing is dropped', async (t) => {
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'));
  t.after(() => daemon.stop());
  const raw = new WebSocket(`${daemon.ready.url.replace(/^http/, 'ws')}/rpc`, {
    headers: { authorization: `Bearer ${daemon.ready.token}` },
  });
  await new Promise((resolve, reject) => raw.once('open', resolve).once('error', reject));
  t.after(() => raw.close());
  const answers: Array<{
    id?: unknown;
    result?: { id?: string; rollouts?: number };
    error?: { code: number; message: string };
  }> = [];
  raw.on('message', (data) => {
    const message = JSON.parse(data.toString()) as (typeof answers)[number] & { method?: string };
    if (message.method === undefined) answers.push(message);
  });
  // Sent in one write (the socket corked), so the daemon reads the second of each pair while the first is pending.
  const socket = (raw as unknown as { _socket: net.Socket })._socket;
  socket.cork();
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'lightning/rollouts/create', params: { label: 'first' } }));
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'lightning/rollouts/create', params: { label: 'second' } }));
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: 'x', method: 'lightning/stats/get', params: {} }));
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: 'x', method: 'lightning/rollouts/list', params: {} }));
  // vscode-jsonrpc keys its queue by the id's text: while 1 is pending, "1" is refused too.
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: '1', method: 'lightning/stats/get', params: {} }));
  socket.uncork();
  await waitFor(() => answers.length >= 5, 'an answer to each of the five requests');

  const of = (id: unknown) => answers.filter((answer) => answer.id === id);
  assert.equal(of(1).length, 2, JSON.stringify(of(1)));
  assert.ok(
    of(1).some((answer) => typeof answer.result?.id === 'string'),
    'the first create is answered with its rollout',
  );
  const refused = of(1).find((answer) => answer.error)!;
  assert.equal(refused.error!.code, -32600);
  assert.match(refused.error!.message, /request id 1 is already in use by a request not yet answered/);
  assert.equal(of('x').length, 2);
  assert.match(of('x').find((answer) => answer.error)!.error!.message, /request id "x" is already in use/);
  assert.equal(of('1').length, 1);
  assert.match(of('1')[0]!.error!.message, /request id "1" is already in use/);

  // Nothing half-done: exactly the one create that was answered ran; an id is free again once answered.
  raw.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'lightning/stats/get', params: {} }));
  await waitFor(() => answers.length >= 6, 'the answer to a reused, already answered id');
  assert.equal(answers[5]!.id, 1);
  assert.equal(answers[5]!.result?.rollouts, 1);
});
