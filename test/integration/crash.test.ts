import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { llmSpan } from '../helpers/spans';
import { tempDir, waitFor } from '../helpers/tmp';

test('kill -9 during a burst of writes loses no acknowledged write', async (t) => {
  const store = path.join(tempDir(t), 'store.db');
  const daemon = await startDaemon(store);
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const rollout = await client.request('createRollout', { label: 'crash' });

  const ackedRewards: number[] = [];
  const ackedSpans: string[] = [];
  let refused = 0;
  const writes: Array<Promise<void>> = [];
  for (let i = 0; i < 3_000; i += 1) {
    const write =
      i % 2 === 0
        ? client
            .request('addReward', { rolloutId: rollout.id, value: i, source: 'agent' })
            .then((reward) => void ackedRewards.push(reward.id))
        : client.request('addSpans', { rolloutId: rollout.id, spans: [llmSpan(), llmSpan()] }).then(({ results }) => {
            for (const result of results) if (result.kind === 'stored') ackedSpans.push(result.spanId);
          });
    writes.push(write.catch(() => void (refused += 1)));
  }
  await waitFor(() => ackedRewards.length + ackedSpans.length >= 600, 'the first acknowledgements', 20_000);
  assert.equal(await daemon.stop('SIGKILL'), 'SIGKILL');
  await Promise.all(writes);
  assert.ok(refused > 0, 'the kill must land mid-burst (some writes were never acknowledged)');

  const db = new BetterSqlite3(store, { readonly: true });
  t.after(() => db.close());
  assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
  const rewardIds = new Set(db.prepare('SELECT id FROM rewards').pluck().all() as number[]);
  const spanIds = new Set(db.prepare('SELECT span_id FROM spans').pluck().all() as string[]);
  assert.deepEqual(
    ackedRewards.filter((id) => !rewardIds.has(id)),
    [],
    'acknowledged rewards missing after the crash',
  );
  assert.deepEqual(
    ackedSpans.filter((id) => !spanIds.has(id)),
    [],
    'acknowledged spans missing after the crash',
  );
  // The rollout's counters were committed with the spans, in the same transactions.
  const counters = db.prepare('SELECT span_count, llm_calls FROM rollouts WHERE id = ?').get(rollout.id) as {
    span_count: number;
    llm_calls: number;
  };
  assert.equal(counters.span_count, spanIds.size);
  assert.equal(counters.llm_calls, spanIds.size);
});
