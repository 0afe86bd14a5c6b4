/**
 * A proxied call whose attempt ended is kept marked late, never mixed into training data — checked in the write
 * that stores it (issue 28): a call recorded in the same group commit as the rollout's end, after it, is marked
 * although the rollout still ran when the call was handed to the write queue; a call of an attempt that timed out,
 * answered while the retry waits or runs, stays with its own attempt, marked, out of the retry's trajectory.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { callRecorder } from '../../trainer-daemon/capture/agentRoutes';
import { PolicyRouter } from '../../trainer-daemon/capture/policyRoutes';
import { silentLogger } from '../../trainer-daemon/log';
import { spanOutcome } from '../../trainer-daemon/protocol/outcome';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { OtlpReceiver } from '../../trainer-daemon/otlp/receiver';
import { parsed } from '../helpers/params';
import { llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';

function callSpan() {
  return llmSpan({ attributes: { 'lightning.api': 'chat.completions', 'lightning.outcome': 'ok' } });
}

test('a call queued while its rollout ran but written after its end (one group commit) is kept, marked late', async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const writes = new WriteQueue(store, silentLogger);
  const record = callRecorder(store, writes, new PolicyRouter());
  const { rollout } = store.startAgentRun(parsed('createRollout', {}), { upstream: null, tokenIds: false });

  const owner = { rolloutId: rollout.id, attempt: 1 };
  await record(callSpan(), owner);
  // The end and a call answered at the same moment: both queued in this turn, the end first.
  const ending = writes.submit(() =>
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'succeeded' })),
  );
  assert.equal(store.getRollout(rollout.id).status, 'running', 'the call is handed over while the rollout runs');
  const late = record(callSpan(), owner);
  await Promise.all([ending, late]);

  const [onTime, marked] = store.getRolloutDetail(rollout.id).spans;
  assert.equal(onTime!.attributes['lightning.late'], undefined);
  assert.deepEqual(spanOutcome(onTime!), { kind: 'ok' });
  assert.match(
    String(marked!.attributes['lightning.late']),
    /the rollout had ended \(succeeded\) when this call was recorded/,
  );
  assert.deepEqual(spanOutcome(marked!), { kind: 'truncated', limit: 'rollout_ended' }, 'left out of training');
  // Spans that are not a proxy's record of a call (OTLP, spans/add) are not touched by this rule.
  const other = store.addSpans({ rolloutId: rollout.id, spans: [llmSpan()] });
  const [stored] = store.listSpans(rollout.id, other.stored[0]!.sequence - 1, 1);
  assert.equal(stored!.attributes['lightning.late'], undefined);
});

test('a call of an attempt that timed out, answered while the retry waits and while it runs: kept with its attempt, late', async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const writes = new WriteQueue(store, silentLogger);
  const record = callRecorder(store, writes, new PolicyRouter());
  const keys = { upstream: null, tokenIds: false };
  const { rollout, key } = store.startAgentRun(parsed('createRollout', { maxAttempts: 2 }), keys);
  const first = store.findAgentKey(key)!;
  assert.deepEqual([first.rolloutId, first.attempt], [rollout.id, 1]);
  await record(callSpan(), first);
  store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'timeout', error: 'too slow' }));
  store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'queued' }));
  await record(callSpan(), first); // answered while the retry waits
  const retry = store.startAgentRun(rollout.id, keys);
  assert.equal(store.findAgentKey(retry.key)!.attempt, 2, "the retry's key is the retry's");
  assert.equal(store.findAgentKey(key), undefined, "the first attempt's key was revoked as it ended");
  await record(callSpan(), first); // answered while the retry runs
  await record(callSpan(), store.findAgentKey(retry.key)!);

  const spans = store.getRolloutDetail(rollout.id).spans;
  assert.deepEqual(
    spans.map((span) => [span.attempt, spanOutcome(span).kind]),
    [
      [1, 'ok'],
      [1, 'truncated'],
      [1, 'truncated'],
      [2, 'ok'],
    ],
  );
  assert.match(String(spans[1]!.attributes['lightning.late']), /its attempt 1 had ended .*\(the rollout is queued\)/);
  assert.match(
    String(spans[2]!.attributes['lightning.late']),
    /its attempt 1 had ended .*\(the rollout runs attempt 2\)/,
  );
  // Training reads the last attempt: the retry's own call, none of the first attempt's.
  const [trajectory] = store.trajectoriesOf([rollout.id]);
  assert.deepEqual(
    trajectory!.spans.map((span) => span.spanId),
    [spans[3]!.spanId],
  );
});

test("an OTLP export past the key check (or admitted with the daemon's token) when its attempt ends: its spans stay with that attempt, marked late", async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const writes = new WriteQueue(store, silentLogger);
  const receiver = new OtlpReceiver(writes, 10_000_000, silentLogger);
  t.after(() => receiver.close());
  const keys = { upstream: null, tokenIds: false };
  /** `rolloutId`: named by the resource (the shared endpoint, the daemon's token) instead of a key's URL. */
  const body = (spanId: string, name: string, rolloutId?: string): Buffer =>
    Buffer.from(
      JSON.stringify({
        resourceSpans: [
          {
            ...(rolloutId
              ? { resource: { attributes: [{ key: 'lightning.rollout_id', value: { stringValue: rolloutId } }] } }
              : {}),
            scopeSpans: [
              {
                spans: [
                  {
                    traceId: 'ab'.repeat(16),
                    spanId,
                    name,
                    kind: 1,
                    startTimeUnixNano: '1700000000000000000',
                    endTimeUnixNano: '1700000000100000000',
                    attributes: [{ key: 'gen_ai.operation.name', value: { stringValue: 'execute_tool' } }],
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
  // The export waits in the span window while the attempt fails and the retry starts (one write, as the runner's).
  const { rollout, key } = store.startAgentRun(parsed('createRollout', { maxAttempts: 2 }), keys);
  const owner = store.findAgentKey(key)!;
  const late = receiver.ingest(
    rollout.id,
    body('1111111111111111', 'tool of attempt 1'),
    'application/json',
    undefined,
    undefined,
    {
      attempt: owner.attempt,
    },
  );
  const retry = writes.submit(() => {
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'failed', error: 'crashed' }));
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'queued' }));
  });
  await Promise.all([late, retry]);
  const second = store.startAgentRun(rollout.id, keys);
  await receiver.ingest(
    rollout.id,
    body('2222222222222222', 'tool of attempt 2'),
    'application/json',
    undefined,
    undefined,
    {
      attempt: store.findAgentKey(second.key)!.attempt,
    },
  );
  const spans = store.getRolloutDetail(rollout.id).spans;
  assert.deepEqual(
    spans.map((span) => [span.name, span.attempt, span.attributes['lightning.late'] === undefined]),
    [
      ['tool of attempt 1', 1, false],
      ['tool of attempt 2', 2, true],
    ],
  );
  assert.match(String(spans[0]!.attributes['lightning.late']), /its attempt 1 had ended when this span was recorded/);
  const [trajectory] = store.trajectoriesOf([rollout.id]);
  assert.deepEqual(
    trajectory!.spans.map((span) => span.name),
    ['tool of attempt 2'],
  );

  // Sent with the daemon's token (no key): admitted for the attempt running then, which ends before the write.
  const shared = receiver.ingest(
    null,
    body('3333333333333333', 'tool sent with the token', rollout.id),
    'application/json',
    undefined,
    () => ({ attempt: 2 }),
  );
  const ended = writes.submit(() =>
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'failed', error: 'crashed' })),
  );
  await Promise.all([shared, ended]);

  const withShared = store.getRolloutDetail(rollout.id).spans[2]!;
  assert.deepEqual([withShared.name, withShared.attempt], ['tool sent with the token', 2]);
  assert.match(String(withShared.attributes['lightning.late']), /its attempt 2 had ended/);
});
