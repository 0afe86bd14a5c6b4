import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { createHandlers, invoke } from '../../trainer-daemon/rpc/handlers';
import { Store } from '../../trainer-daemon/store/store';
import { RolloutTransitions, type SpanInput } from '../../trainer-daemon/protocol';
import { llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

/**
 * transitions/forRollout through the handler table on a real store: what an export of the batch would say about one
 * rollout.
 */
/** A train rollout of `taskId` in batch-a of dataset ds, run to `succeeded` with these spans. */
function finished(store: Store, taskId: string, spans: SpanInput[]): string {
  const { id } = store.createRollout(
    parsed('createRollout', { mode: 'train', task: { id: taskId, input: null }, datasetId: 'ds', batchId: 'batch-a' }),
  );
  store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
  store.addSpans({ rolloutId: id, spans });
  store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }));
  return id;
}

test('transitions/forRollout: calls included with credited reward and the batch group advantage; exclusions say why', async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const handlers = createHandlers({
    store,
    info: () => ({ version: 'test', pid: process.pid, store: 'x', schemaVersion: store.schemaVersion, startedAt: 0 }),
  });
  const ids: string[] = [];
  for (const [value, calls] of [
    [1, 2],
    [0, 1],
    [0, 1],
    [1, 1],
  ] as const) {
    const id = finished(
      store,
      'task-1',
      Array.from({ length: calls }, () =>
        llmSpan({
          attributes: {
            'lightning.api': 'chat.completions',
            'lightning.prompt_token_ids': [1, 2, 3],
            'lightning.response_token_ids': [4],
          },
        }),
      ),
    );
    store.addReward(parsed('addReward', { rolloutId: id, value, source: 'rule', reason: 'exact match' }));
    ids.push(id);
  }
  // Another batch's rollout of the same task is not in the group.
  const elsewhere = store.createRollout(
    parsed('createRollout', { task: { id: 'task-1', input: null }, datasetId: 'ds', batchId: 'batch-b' }),
  ).id;
  store.addReward(parsed('addReward', { rolloutId: elsewhere, value: 5, source: 'agent' }));

  const view = RolloutTransitions.parse(await invoke(handlers, 'rolloutTransitions', { rolloutId: ids[0] }));
  assert.equal(view.included, true);
  assert.equal(view.episodeReward, 1);
  assert.deepEqual(
    {
      scope: view.group.scope,
      scopeId: view.group.scopeId,
      rewarded: view.group.rewarded,
      mean: view.group.mean,
      std: view.group.std,
    },
    { scope: 'batch', scopeId: 'batch-a', rewarded: 4, mean: 0.5, std: Math.sqrt(1 / 3) },
  );
  // GRPO: (1 − 0.5) / (√(1/3) + 1e-4) ≈ 0.8659 (the sample std, as TRL), broadcast to both calls; identical credit
  // gives R to each.
  assert.deepEqual(
    view.calls.map((c) => [
      c.included,
      c.step,
      c.reward,
      Math.round(c.advantage! * 1e4) / 1e4,
      c.promptTokenIds,
      c.responseTokenIds,
      c.retokenized,
      c.promptTokens,
    ]),
    [
      [true, 0, 1, 0.8659, 3, 1, false, 20],
      [true, 1, 1, 0.8659, 3, 1, false, 20],
    ],
  );

  const discounted = await invoke(handlers, 'rolloutTransitions', {
    rolloutId: ids[0],
    credit: { kind: 'discounted', gamma: 0.5 },
  });
  assert.deepEqual(
    discounted.calls.map((c) => c.reward),
    [0.5, 1],
  );

  // The human says 0: the episode reward follows the policy (latest human), and the group changes.
  store.addReward(parsed('addReward', { rolloutId: ids[3]!, value: 0, source: 'human' }));
  const after = await invoke(handlers, 'rolloutTransitions', { rolloutId: ids[1] });
  assert.equal(after.group.mean, 0.25);

  const unrated = finished(store, 'task-2', [llmSpan()]);
  const excluded = await invoke(handlers, 'rolloutTransitions', { rolloutId: unrated });
  assert.equal(excluded.included, false);
  assert.match(excluded.why!, /no "reward" reward/);
  assert.deepEqual(
    excluded.calls.map((c) => [c.included, c.advantage]),
    [[false, null]],
  );
  assert.match(excluded.calls[0]!.why!, /no "reward" reward/);

  store.addReward(parsed('addReward', { rolloutId: unrated, value: 1, source: 'human' }));
  const single = await invoke(handlers, 'rolloutTransitions', { rolloutId: unrated });
  assert.equal(single.included, true);
  assert.match(single.group.note!, /group of one/);
  assert.equal(single.calls[0]!.advantage, 0);
  assert.equal(single.calls[0]!.retokenized, true, 'no engine token ids: the trainer re-tokenizes');

  const agent = await invoke(handlers, 'rolloutTransitions', { rolloutId: unrated, agent: '^planner$' });
  assert.match(agent.calls[0]!.why!, /planner/);
  await assert.rejects(
    invoke(handlers, 'rolloutTransitions', { rolloutId: unrated, agent: '(' }),
    /params\.agent: not a regular expression/,
  );
  await assert.rejects(
    invoke(handlers, 'rolloutTransitions', { rolloutId: 'ro-nope' }),
    /rollout ro-nope does not exist/,
  );

  // With an agent chosen, the group is what the export's advantages compare: the rewarded rollouts of the task with a
  // call of that agent — here the planner's rollout alone, not the batch's four others without one.
  const planner = finished(store, 'task-1', [
    llmSpan({ attributes: { 'lightning.api': 'chat.completions', 'gen_ai.agent.name': 'planner' } }),
  ]);
  store.addReward(parsed('addReward', { rolloutId: planner, value: 1, source: 'rule' }));
  const planned = await invoke(handlers, 'rolloutTransitions', { rolloutId: planner, agent: '^planner$' });
  assert.equal(planned.included, true);
  assert.deepEqual([planned.group.rewarded, planned.group.mean], [1, 1]);
  assert.match(planned.group.note!, /group of one/);
  assert.equal(planned.calls[0]!.advantage, 0, 'the advantage shown is the one its group gives');
  const everyone = await invoke(handlers, 'rolloutTransitions', { rolloutId: planner });
  assert.equal(everyone.group.rewarded, 5, 'without an agent chosen, every rewarded rollout of the task in the batch');
});

test('transitions/forRollout: a call that was not a whole answer is left out and says so; its retry is the sample', async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const handlers = createHandlers({
    store,
    info: () => ({ version: 'test', pid: process.pid, store: 'x', schemaVersion: store.schemaVersion, startedAt: 0 }),
  });
  const { id } = store.createRollout(parsed('createRollout', { mode: 'train', task: { id: 'task-1', input: null } }));
  store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
  const failed = llmSpan({
    statusCode: 'error',
    statusMessage: 'upstream HTTP 429',
    attributes: {
      'lightning.api': 'chat.completions',
      'lightning.outcome': 'upstream_error',
      'http.response.status_code': 429,
    },
  });
  const retry = llmSpan({
    attributes: { 'lightning.api': 'chat.completions', 'lightning.outcome': 'ok', 'lightning.retry_of': failed.spanId },
  });
  store.addSpans({ rolloutId: id, spans: [failed, retry] });
  store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }));
  store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'human' }));
  const view = await invoke(handlers, 'rolloutTransitions', { rolloutId: id });
  assert.deepEqual(
    view.calls.map((c) => [c.spanId, c.included, c.step]),
    [
      [failed.spanId, false, null],
      [retry.spanId, true, 0],
    ],
  );
  assert.equal(view.calls[0]!.why, 'not a whole answer (HTTP 429): left out of training');
});

test("transitions/forRollout: an earlier attempt's calls are listed as such, and a last attempt without calls says so", async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const handlers = createHandlers({
    store,
    info: () => ({ version: 'test', pid: process.pid, store: 'x', schemaVersion: store.schemaVersion, startedAt: 0 }),
  });
  const run = (attempt: 'failed' | 'succeeded', spans: SpanInput[]): void => {
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    store.addSpans({ rolloutId: id, spans });
    store.transitionRollout(parsed('transitionRollout', { id, to: attempt }));
  };
  const { id } = store.createRollout(
    parsed('createRollout', { mode: 'train', maxAttempts: 3, task: { id: 'task-1', input: null } }),
  );
  const first = llmSpan({ attributes: { 'lightning.api': 'chat.completions' } });
  run('failed', [first]);
  store.transitionRollout(parsed('transitionRollout', { id, to: 'queued' }));
  const second = llmSpan({ attributes: { 'lightning.api': 'chat.completions' } });
  run('succeeded', [second]);
  store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'human' }));
  const view = await invoke(handlers, 'rolloutTransitions', { rolloutId: id });
  assert.deepEqual(
    view.calls.map((c) => [c.spanId, c.included, c.why]),
    [
      [first.spanId, false, 'made in attempt 1, not the last (2): only the last attempt trains'],
      [second.spanId, true, null],
    ],
  );
  // A retry that made no call: the rollout trains nothing, and says why (not "no LLM calls" at all).
  const other = store.createRollout(
    parsed('createRollout', { mode: 'train', maxAttempts: 2, task: { id: 'task-2', input: null } }),
  ).id;
  store.transitionRollout(parsed('transitionRollout', { id: other, to: 'running' }));
  store.addSpans({ rolloutId: other, spans: [llmSpan({ attributes: { 'lightning.api': 'chat.completions' } })] });
  store.transitionRollout(parsed('transitionRollout', { id: other, to: 'failed' }));
  store.transitionRollout(parsed('transitionRollout', { id: other, to: 'queued' }));
  store.transitionRollout(parsed('transitionRollout', { id: other, to: 'running' }));
  store.transitionRollout(parsed('transitionRollout', { id: other, to: 'succeeded' }));
  store.addReward(parsed('addReward', { rolloutId: other, value: 1, source: 'human' }));
  const empty = await invoke(handlers, 'rolloutTransitions', { rolloutId: other });
  assert.equal(empty.why, 'its last attempt (2) made no LLM calls: only the last attempt trains');
});
