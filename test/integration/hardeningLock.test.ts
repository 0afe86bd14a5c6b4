/**
 * Another process holds the store's write lock (BEGIN IMMEDIATE on its own connection): the daemon
 * keeps answering reads and health checks meanwhile, a write waits without blocking them and is made
 * once the lock is released, and a write still locked out at the end of its wait is a retryable 503. The lock also
 * orders an OTLP export admitted with the daemon's token against its attempt's end, to test the span written late.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { SpanKind } from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { openConnection } from '../../trainer-daemon/store/driver';
import { Store } from '../../trainer-daemon/store/store';
import { startDaemon } from '../helpers/daemon';
import { post } from '../helpers/http';
import { encode, oneSpan } from '../helpers/otlp';
import { parsed } from '../helpers/params';
import { tempDir, waitFor } from '../helpers/tmp';

test('while another connection holds the write lock, reads are answered, writes wait and are made once it is released, or get a retryable 503', async (t) => {
  const storeFile = path.join(tempDir(t), 'store.db');
  const daemon = await startDaemon(storeFile);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { rollout, url } = await client.request('startAgentRun', { label: 'locked out' });

  const outside = openConnection(storeFile, { readonly: false }).db;
  t.after(() => outside.close());
  outside.exec('BEGIN IMMEDIATE');
  const events: string[] = [];
  const write = client.request('createRollout', { label: 'made after the lock' }).then(
    (created) => {
      events.push('write answered');
      return created;
    },
    (error: unknown) => {
      events.push('write failed');
      throw error;
    },
  );
  // Reads and health checks while the write waits for the lock.
  const stats = await client.request('getStats', {});
  events.push('read answered');
  assert.equal((await fetch(`${daemon.ready.url}/health`)).status, 200);
  events.push('health answered');
  assert.deepEqual(events, ['read answered', 'health answered'], 'answered while the lock is held, before the write');
  assert.equal(stats.rollouts, 1);

  outside.exec('COMMIT');
  const created = await write;
  assert.deepEqual(events, ['read answered', 'health answered', 'write answered']);
  assert.equal(
    (await client.request('getRollout', { id: created.id, spans: false })).rollout.label,
    'made after the lock',
    'the write was made, not lost',
  );

  // Held past the write's wait: a 503 the agent retries, and nothing half-written.
  outside.exec('BEGIN IMMEDIATE');
  const reward = await post(`${url}/reward`, JSON.stringify({ value: 1 }));
  assert.equal(reward.status, 503, reward.body);
  assert.equal(reward.retryAfter, '1');
  assert.match(reward.body, /another process holds the store’s write lock/);
  outside.exec('COMMIT');
  assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rewards.length, 0);
  const retried = await post(`${url}/reward`, JSON.stringify({ value: 1 }));
  assert.equal(retried.status, 200, retried.body);
  assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rewards.length, 1);
});

test("spans sent with the daemon's token for a running rollout whose attempt ends before they are written: kept with that attempt, marked late", async (t) => {
  const storeFile = path.join(tempDir(t), 'store.db');
  const daemon = await startDaemon(storeFile);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { rollout } = await client.request('startAgentRun', { label: 'ends while its spans wait' });

  // The daemon admits the export while attempt 1 runs; its write then waits for another process's lock, in whose
  // transaction the attempt ends: the order of a long export's decode against the agent's end, made certain.
  const outside = Store.open(storeFile);
  t.after(() => outside.close());
  outside.db.exec('BEGIN IMMEDIATE');
  const exported = post(
    `${daemon.ready.url}/v1/traces`,
    encode(
      oneSpan(
        'execute_tool add',
        { 'gen_ai.operation.name': 'execute_tool' },
        SpanKind.INTERNAL,
        resourceFromAttributes({ 'lightning.rollout_id': rollout.id }),
      ),
      'json',
    ),
    { 'content-type': 'application/json', authorization: `Bearer ${daemon.ready.token}` },
  );
  await waitFor(() => /writes wait for it/.test(daemon.stderr()), 'the write waiting for the lock');
  outside.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'failed', error: 'crashed' }));
  outside.db.exec('COMMIT');
  const answer = await exported;
  assert.equal(answer.status, 200, answer.body);

  const [span] = (await client.request('getRollout', { id: rollout.id })).spans;
  assert.deepEqual([span!.name, span!.attempt], ['execute_tool add', 1]);
  assert.match(String(span!.attributes['lightning.late']), /its attempt 1 had ended when this span was recorded/);
});
