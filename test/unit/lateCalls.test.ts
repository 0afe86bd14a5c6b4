/**
 * A proxied call whose rollout ended is kept marked late, never mixed into training data — checked in the write
 * that stores it (issue 28): a call recorded in the same group commit as the rollout's end, after it, is marked
 * although the rollout still ran when the call was handed to the write queue.
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

  await record(callSpan(), rollout.id);
  // The end and a call answered at the same moment: both queued in this turn, the end first.
  const ending = writes.submit(() =>
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'succeeded' })),
  );
  assert.equal(store.getRollout(rollout.id).status, 'running', 'the call is handed over while the rollout runs');
  const late = record(callSpan(), rollout.id);
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
  assert.equal(other.stored[0]!.attributes['lightning.late'], undefined);
});
