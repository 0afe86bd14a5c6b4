import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidTransitionError, NotFoundError } from '../../trainer-daemon/protocol/errors';
import { type RolloutStatus } from '../../trainer-daemon/protocol';
import { TRANSITIONS } from '../../trainer-daemon/store/rollouts';
import { TWIN_WINDOW, TWINS_QUERY, validateSpans } from '../../trainer-daemon/store/spans';
import { llmSpan } from '../helpers/spans';
import { openStore, rolloutKey } from '../helpers/store';
import { parsed } from '../helpers/params';

describe('store: rollout lifecycle', () => {
  test('a rollout goes queued → running → succeeded with one attempt recorded', (t) => {
    const store = openStore(t);
    const created = store.createRollout(
      parsed('createRollout', { label: 'demo', task: { id: 't1', input: { question: '2+2' } } }),
    );
    assert.equal(created.status, 'queued');
    assert.equal(created.attemptCount, 0);
    assert.deepEqual(created.task, { id: 't1', input: { question: '2+2' } });
    const running = store.transitionRollout(parsed('transitionRollout', { id: created.id, to: 'running' }));
    assert.equal(running.attemptCount, 1);
    assert.ok(running.startedAt !== null);
    const done = store.transitionRollout(parsed('transitionRollout', { id: created.id, to: 'succeeded', exitCode: 0 }));
    assert.equal(done.status, 'succeeded');
    assert.equal(done.exitCode, 0);
    assert.ok(done.endedAt !== null && done.endedAt >= running.startedAt);
    const { attempts } = store.getRolloutDetail(created.id);
    assert.deepEqual(
      attempts.map((a) => [a.number, a.status, a.exitCode]),
      [[1, 'succeeded', 0]],
    );
  });

  test('every transition not in the table is rejected with a message naming both statuses, and changes nothing', (t) => {
    const store = openStore(t);
    const reach: Record<RolloutStatus, (id: string) => void> = {
      queued: () => {},
      running: (id) => store.transitionRollout(parsed('transitionRollout', { id, to: 'running' })),
      succeeded: (id) => (
        store.transitionRollout(parsed('transitionRollout', { id, to: 'running' })),
        store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }))
      ),
      failed: (id) => (
        store.transitionRollout(parsed('transitionRollout', { id, to: 'running' })),
        store.transitionRollout(parsed('transitionRollout', { id, to: 'failed' }))
      ),
      timeout: (id) => (
        store.transitionRollout(parsed('transitionRollout', { id, to: 'running' })),
        store.transitionRollout(parsed('transitionRollout', { id, to: 'timeout' }))
      ),
      cancelled: (id) => store.transitionRollout(parsed('transitionRollout', { id, to: 'cancelled' })),
    };
    const statuses = Object.keys(TRANSITIONS) as RolloutStatus[];
    let checked = 0;
    for (const from of statuses) {
      for (const to of statuses) {
        const rollout = store.createRollout(parsed('createRollout', { maxAttempts: 3 }));
        reach[from](rollout.id);
        const before = store.getRolloutDetail(rollout.id);
        if (TRANSITIONS[from].includes(to)) {
          assert.equal(
            store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to })).status,
            to,
            `${from} → ${to}`,
          );
        } else {
          assert.throws(
            () => store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to })),
            (error: unknown) =>
              error instanceof InvalidTransitionError && error.message.includes(`is ${from} and cannot become ${to}`),
            `${from} → ${to} must be refused`,
          );
          assert.deepEqual(store.getRolloutDetail(rollout.id), before, `${from} → ${to} must change nothing`);
          checked += 1;
        }
      }
    }
    assert.equal(checked, 36 - Object.values(TRANSITIONS).flat().length);
  });

  test('a failed rollout is retried as a new attempt until its attempts are used up', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', { maxAttempts: 2 }));
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    store.transitionRollout({ id, to: 'failed', error: 'upstream 500', exitCode: 1 });
    store.transitionRollout(parsed('transitionRollout', { id, to: 'queued' }));
    const second = store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    assert.equal(second.attemptCount, 2);
    assert.equal(second.error, null);
    store.transitionRollout(parsed('transitionRollout', { id, to: 'timeout', error: 'timed out after 120 s' }));
    assert.throws(
      () => store.transitionRollout(parsed('transitionRollout', { id, to: 'queued' })),
      /used all 2 attempt/,
    );
    const { attempts, rollout } = store.getRolloutDetail(id);
    assert.equal(rollout.status, 'timeout');
    assert.deepEqual(
      attempts.map((a) => [a.number, a.status, a.error]),
      [
        [1, 'failed', 'upstream 500'],
        [2, 'timeout', 'timed out after 120 s'],
      ],
    );
  });

  test('unknown rollouts are reported as not found; a unique id prefix resolves', (t) => {
    const store = openStore(t);
    assert.throws(
      () => store.transitionRollout(parsed('transitionRollout', { id: 'ro-nope', to: 'running' })),
      NotFoundError,
    );
    const { id } = store.createRollout(parsed('createRollout', {}));
    assert.equal(store.resolveRolloutId(id.slice(0, 10)), id);
    assert.throws(() => store.resolveRolloutId('ro-'), NotFoundError);
  });
});

describe('store: spans', () => {
  test('spans are numbered in arrival order, duplicates ignored, counters kept', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    const a = llmSpan();
    const b = llmSpan({ category: 'tool', name: 'tool get_weather', promptTokens: null, completionTokens: null });
    const outcome = store.addSpans({ rolloutId: id, spans: [a, b, a] });
    assert.deepEqual(outcome.results, [
      { kind: 'stored', spanId: a.spanId, sequence: 1 },
      { kind: 'stored', spanId: b.spanId, sequence: 2 },
      { kind: 'duplicate', spanId: a.spanId },
    ]);
    const again = store.addSpans({ rolloutId: id, spans: [llmSpan()] });
    assert.deepEqual(
      again.results.map((r) => r.kind === 'stored' && r.sequence),
      [3],
    );
    const detail = store.getRolloutDetail(id);
    assert.deepEqual(
      detail.spans.map((s) => [s.sequence, s.category, s.attempt]),
      [
        [1, 'llm', 1],
        [2, 'tool', 1],
        [3, 'llm', 1],
      ],
    );
    assert.deepEqual(detail.spans[0]!.attributes, a.attributes);
    assert.equal(detail.rollout.spanCount, 3);
    assert.equal(detail.rollout.llmCalls, 2);
    assert.equal(detail.rollout.promptTokens, 40);
    assert.equal(detail.rollout.completionTokens, 10);
    // Without its spans (a header's read): the same record and counters, no span rows.
    const light = store.getRolloutDetail(id, { spans: false });
    assert.deepEqual(light.spans, []);
    assert.deepEqual({ ...light, spans: detail.spans }, detail);
  });

  test('raw spans are validated one by one where they enter: bad ones get a result naming the field', () => {
    const good = llmSpan();
    const { valid, validIndexes, results } = validateSpans([{ ...good, spanId: 'not-hex' }, good, { name: 'x' }]);
    assert.deepEqual(
      valid.map((s) => s.spanId),
      [good.spanId],
    );
    assert.deepEqual(validIndexes, [1]);
    assert.deepEqual(results[0], {
      kind: 'invalid',
      index: 0,
      error: 'spans.0.spanId: spanId must be 16 lowercase hex characters',
    });
    assert.equal(results[1], undefined);
    assert.equal(results[2]!.kind, 'invalid');
    assert.match((results[2] as { error: string }).error, /spans\.2\.traceId/);
  });

  test('an LLM call seen by the proxy and in OTLP (same response id) is one step, whichever arrives first', (t) => {
    const store = openStore(t);
    const proxied = (id: string) =>
      llmSpan({
        attributes: { 'gen_ai.response.id': id, 'lightning.api': 'chat.completions' },
        promptTokens: 20,
        completionTokens: 5,
      });
    const traced = (id: string) =>
      llmSpan({
        attributes: { 'gen_ai.response.id': id, 'gen_ai.system': 'openai' },
        promptTokens: 19,
        completionTokens: 4,
      });
    for (const order of ['proxy first', 'otlp first'] as const) {
      const { id } = store.createRollout(parsed('createRollout', { label: order }));
      const [first, second] =
        order === 'proxy first' ? [proxied('resp-1'), traced('resp-1')] : [traced('resp-1'), proxied('resp-1')];
      store.addSpans({ rolloutId: id, spans: [first] });
      store.addSpans({ rolloutId: id, spans: [second, traced('resp-2')] });
      const detail = store.getRolloutDetail(id);
      const steps = detail.spans.filter((s) => s.category === 'llm');
      assert.deepEqual(
        steps.map((s) => s.attributes['gen_ai.response.id']),
        ['resp-1', 'resp-2'],
        order,
      );
      const step1 = steps.find((s) => s.attributes['gen_ai.response.id'] === 'resp-1')!;
      assert.equal(step1.attributes['lightning.api'], 'chat.completions', `${order}: the proxy's record is the step`);
      const twin = detail.spans.find((s) => s.category === 'other')!;
      assert.equal(twin.attributes['lightning.same_call_as'], step1.spanId);
      assert.equal(detail.rollout.llmCalls, 2, order);
      assert.deepEqual(
        [detail.rollout.promptTokens, detail.rollout.completionTokens],
        [20 + 19, 5 + 4],
        `${order}: tokens counted once per call`,
      );
    }
  });

  test('two calls answered with the same response id stay two steps; each OTLP twin ties to its own call', (t) => {
    const store = openStore(t);
    for (const api of ['chat.completions', 'responses', 'anthropic.messages']) {
      const proxied = () =>
        llmSpan({
          attributes: { 'gen_ai.response.id': 'constant', 'lightning.api': api },
          promptTokens: 10,
          completionTokens: 2,
        });
      const traced = () =>
        llmSpan({
          attributes: { 'gen_ai.response.id': 'constant', 'gen_ai.system': 'x' },
          promptTokens: 9,
          completionTokens: 1,
        });
      const { id } = store.createRollout(parsed('createRollout', { label: api }));
      const [call1, call2] = [proxied(), proxied()];
      store.addSpans({ rolloutId: id, spans: [call1] });
      store.addSpans({ rolloutId: id, spans: [call2] });
      store.addSpans({ rolloutId: id, spans: [traced(), traced()] });
      const detail = store.getRolloutDetail(id);
      assert.deepEqual(
        detail.spans.filter((s) => s.category === 'llm').map((s) => s.spanId),
        [call1.spanId, call2.spanId],
        `${api}: both calls are steps`,
      );
      assert.deepEqual(
        detail.spans.filter((s) => s.category === 'other').map((s) => s.attributes['lightning.same_call_as']),
        [call1.spanId, call2.spanId],
        `${api}: one twin per call`,
      );
      assert.equal(detail.rollout.llmCalls, 2, api);
      // A third proxied call with that id, after the twins: still its own step.
      store.addSpans({ rolloutId: id, spans: [proxied()] });
      assert.equal(store.getRollout(id).llmCalls, 3, api);
    }
  });

  test('without the proxy, two OTLP spans of one id are one call only when traced twice (same trace, overlapping)', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    const traced = (traceId: string, startMs: number, endMs: number) =>
      llmSpan({
        traceId,
        startMs,
        endMs,
        attributes: { 'gen_ai.response.id': 'constant', 'gen_ai.system': 'x' },
        promptTokens: 9,
        completionTokens: 1,
      });
    const trace = 'ab'.repeat(16);
    // The SDK's span and the framework's around it: one call, traced twice.
    const sdk = traced(trace, 1_000, 1_100);
    const framework = traced(trace, 990, 1_120);
    // A server answering every call with the same id: a later call in the same trace, and one in another trace.
    const later = traced(trace, 2_000, 2_100);
    const otherTrace = traced('cd'.repeat(16), 1_000, 1_100);
    store.addSpans({ rolloutId: id, spans: [sdk] });
    store.addSpans({ rolloutId: id, spans: [framework, later] });
    store.addSpans({ rolloutId: id, spans: [otherTrace] });
    const detail = store.getRolloutDetail(id);
    assert.deepEqual(
      detail.spans.filter((s) => s.category === 'llm').map((s) => s.spanId),
      [sdk.spanId, later.spanId, otherTrace.spanId],
      'three calls are three steps',
    );
    const twin = detail.spans.find((s) => s.spanId === framework.spanId)!;
    assert.equal(twin.category, 'other');
    assert.equal(twin.attributes['lightning.same_call_as'], sdk.spanId);
    assert.equal(detail.rollout.llmCalls, 3);
  });

  test('one call seen three times (the proxy, the SDK’s span, the framework’s around it) is one step, in any order', (t) => {
    const store = openStore(t);
    const trace = 'ef'.repeat(16);
    const view = (startMs: number, endMs: number, attributes: Record<string, string>) =>
      llmSpan({ traceId: trace, startMs, endMs, attributes: { 'gen_ai.response.id': 'resp-9', ...attributes } });
    for (const order of [
      ['proxy', 'sdk', 'framework'],
      ['sdk', 'framework', 'proxy'],
      ['framework', 'proxy', 'sdk'],
    ]) {
      const views: Record<string, ReturnType<typeof llmSpan>> = {
        proxy: view(1_010, 1_090, { 'lightning.api': 'chat.completions' }),
        sdk: view(1_000, 1_100, { 'gen_ai.system': 'openai' }),
        framework: view(990, 1_120, { 'gen_ai.system': 'langchain' }),
      };
      const { id } = store.createRollout(parsed('createRollout', { label: order.join(' ') }));
      for (const name of order) store.addSpans({ rolloutId: id, spans: [views[name]!] });
      const detail = store.getRolloutDetail(id);
      assert.deepEqual(
        detail.spans.filter((s) => s.category === 'llm').map((s) => s.spanId),
        [views.proxy!.spanId],
        `${order.join(' → ')}: the proxy's record is the one step`,
      );
      assert.equal(detail.rollout.llmCalls, 1, order.join(' → '));
    }
  });

  test('a server answering every call with one id: each lookup reads the latest calls of it only, and twins still tie', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    const call = (i: number, attributes: Record<string, string>) =>
      llmSpan({
        traceId: (i + 1).toString(16).padStart(32, '0'),
        startMs: i * 1_000,
        endMs: i * 1_000 + 500,
        attributes: { 'gen_ai.response.id': '', ...attributes },
      });
    const calls = TWIN_WINDOW * 3;
    for (let i = 0; i < calls; i += 1) store.addSpans({ rolloutId: id, spans: [call(i, {})] });
    // The lookup for that id reads at most the window, however many calls share it.
    const read = store.db.prepare(TWINS_QUERY).all(JSON.stringify(['']), rolloutKey(store, id));
    assert.equal(read.length, TWIN_WINDOW);
    // A call's OTLP span, then the proxy's record of it: tied to each other (not to the earliest call of that id),
    // every other call still a step.
    const traced = call(calls, {});
    store.addSpans({ rolloutId: id, spans: [traced] });
    const proxied = call(calls, { 'lightning.api': 'chat.completions' });
    store.addSpans({ rolloutId: id, spans: [proxied] });
    const detail = store.getRolloutDetail(id);
    assert.equal(detail.rollout.llmCalls, calls + 1);
    const twin = detail.spans.find((s) => s.spanId === traced.spanId)!;
    assert.equal(twin.attributes['lightning.same_call_as'], proxied.spanId);
  });

  test('the twin lookup of every LLM batch goes by index, never through the rollout’s spans (ingest stays linear)', (t) => {
    const store = openStore(t);
    const plan = store.db
      .prepare<[string, number], { detail: string }>(`EXPLAIN QUERY PLAN ${TWINS_QUERY}`)
      .all('[]', 1)
      .map((row) => row.detail);
    // Before: the rollout walked in sequence order, and a scan of its `other` spans per matching row. The latest
    // calls of an id come from the index in rowid order (no sort), each row then by its rowid.
    assert.ok(
      plan.includes('SEARCH r USING COVERING INDEX spans_by_response_id (rollout=? AND response_id=?)'),
      plan.join('\n'),
    );
    assert.ok(plan.includes('SEARCH s USING INTEGER PRIMARY KEY (rowid=?)'), plan.join('\n'));
    assert.ok(plan.includes('SEARCH o USING INDEX spans_by_same_call (rollout=? AND <expr>=?)'), plan.join('\n'));
    assert.ok(!plan.some((line) => /\bSCAN (s|o|spans)\b/.test(line)), plan.join('\n'));
  });

  test('spans for an unknown rollout fail only that rollout’s batch', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    const outcomes = store.addSpanBatches([
      { rolloutId: 'ro-missing', spans: [llmSpan()] },
      { rolloutId: id, spans: [llmSpan()] },
    ]);
    assert.ok(outcomes[0] instanceof NotFoundError);
    assert.equal(store.getRollout(id).spanCount, 1);
  });
});
