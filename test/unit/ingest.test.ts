import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { silentLogger } from '../../trainer-daemon/log';
import type { NotificationName } from '../../trainer-daemon/protocol';
import { ChangeNotifier } from '../../trainer-daemon/rpc/notifier';
import { OverloadedError, SpanWriter } from '../../trainer-daemon/store/spanWriter';
import { Store } from '../../trainer-daemon/store/store';
import { llmSpan } from '../helpers/spans';
import { tempDir, waitFor } from '../helpers/tmp';

function openStore(t: Parameters<typeof tempDir>[0]): Store {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  return store;
}

describe('batched span ingest', () => {
  test('writes queued in one turn of the event loop commit in one transaction, and resolve after the commit', async (t) => {
    const store = openStore(t);
    const writer = new SpanWriter(store, silentLogger);
    const rollouts = [store.createRollout({}).id, store.createRollout({}).id];
    let commits = 0;
    store.onDidAddSpans(() => (commits += 1));
    const pending = Array.from({ length: 50 }, (_, i) => writer.write(rollouts[i % 2]!, [llmSpan()]));
    assert.equal(store.getRollout(rollouts[0]!).spanCount, 0, 'nothing is written synchronously');
    const results = await Promise.all(pending);
    assert.equal(commits, 1);
    assert.ok(results.every((r) => r[0]!.kind === 'stored'));
    assert.equal(store.getRollout(rollouts[0]!).spanCount + store.getRollout(rollouts[1]!).spanCount, 50);
  });

  test('an unknown rollout fails only its own write; the queue is bounded', async (t) => {
    const store = openStore(t);
    const writer = new SpanWriter(store, silentLogger, { maxQueuedSpans: 10, maxBatchSpans: 100 });
    const { id } = store.createRollout({});
    const good = writer.write(id, [llmSpan()]);
    const bad = writer.write('ro-missing', [llmSpan()]);
    const tooMany = writer.write(id, Array.from({ length: 10 }, () => llmSpan()));
    await assert.rejects(tooMany, OverloadedError);
    await assert.rejects(bad, /ro-missing does not exist/);
    assert.equal((await good)[0]!.kind, 'stored');
    writer.shutdown();
    await assert.rejects(writer.write(id, [llmSpan()]), /shutting down/);
  });

  test('notifications are coalesced to at most one of each kind per interval', async (t) => {
    const store = openStore(t);
    const sent: Array<[NotificationName, unknown]> = [];
    const sentAt: number[] = [];
    const notifier = new ChangeNotifier(store, (name, params) => (sent.push([name, params]), sentAt.push(performance.now())), 100);
    t.after(() => notifier.dispose());
    const { id } = store.createRollout({ label: 'a' });
    for (let i = 0; i < 20; i += 1) store.addSpans({ rolloutId: id, spans: [llmSpan()] });
    await waitFor(() => sent.length >= 2, 'first flush');
    assert.deepEqual(sent.map(([name]) => name).sort(), ['rolloutsChanged', 'spansAdded']);
    store.addReward({ rolloutId: id, value: 1 });
    await waitFor(() => sent.length >= 3, 'second flush');
    assert.ok(sentAt[2]! - sentAt[0]! >= 99, 'the second flush waits until the interval since the first has passed');
    const last = sent.at(-1)! as [string, { rollouts: Array<{ reward: number | null; spanCount: number }> }];
    assert.equal(last[0], 'rolloutsChanged');
    assert.deepEqual(last[1].rollouts.map((r) => [r.reward, r.spanCount]), [[1, 20]]);
  });
});
