/**
 * The daemon's worker-batch queue followed in process, as the daemon's own training loops follow it: each attempt
 * pushed as it ends, a cancel told once, the follow ending with the batch, and no `workerBatches/events` poll.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { silentLogger } from '../../trainer-daemon/log';
import type { AttemptEvent } from '../../trainer-daemon/runner/pool';
import { WorkerBatches } from '../../trainer-daemon/runner/workerBatches';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { tempDir, waitFor } from '../helpers/tmp';
import { parsed } from '../helpers/params';

function setUp(
  t: { after(fn: () => void): void },
  rollouts: number,
  maxAttempts = 1,
  leaseMs?: number,
  opened: Parameters<typeof batchParams>[1] = {},
) {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  const writes = new WriteQueue(store, silentLogger);
  const batches = new WorkerBatches({
    store,
    writes,
    logger: silentLogger,
    baseUrl: () => 'http://127.0.0.1:9',
    ...(leaseMs === undefined ? {} : { leaseMs }),
  });
  t.after(() => {
    batches.dispose();
    store.close();
  });
  const ids = Array.from(
    { length: rollouts },
    () => store.createRollout(parsed('createRollout', { mode: 'train', maxAttempts })).id,
  );
  const batch = batches.open(batchParams(ids, opened));
  return { store, batches, ids, batch };
}

/** A worker batch over `rolloutIds`, as a runner opens one (a minute per attempt, 8 rollouts per worker). */
function batchParams(
  rolloutIds: string[],
  overrides: Partial<Pick<Parameters<WorkerBatches['open']>[0], 'timeoutMs' | 'concurrencyPerWorker'>> = {},
): Parameters<WorkerBatches['open']>[0] {
  return {
    rolloutIds,
    upstream: null,
    providerUpstreams: {},
    tokenIds: false,
    timeoutMs: 60_000,
    concurrencyPerWorker: 8,
    ...overrides,
  };
}

describe('worker batches followed in process', () => {
  it('pushes each attempt as it ends, retries included, and ends with the batch; nothing is left for a poll', async (t) => {
    const { batches, ids, batch } = setUp(t, 2, 2);
    const seen: AttemptEvent[] = [];
    let cancelled = 0;
    const followed = batches.follow(batch.id, {
      onAttempt: (event) => seen.push(event),
      onCancelled: () => (cancelled += 1),
    });
    const key = new URL(batch.url).pathname.split('/').at(-1)!;
    const first = await batches.next(key, 'w0', () => true);
    const second = await batches.next(key, 'w0', () => true);
    assert.deepEqual([first?.rolloutId, second?.rolloutId], ids);
    await batches.end(ids[0]!, 'succeeded', null);
    assert.deepEqual(
      seen.map((e) => [e.rollout.id, e.rollout.status, e.retrying]),
      [[ids[0], 'succeeded', false]],
      'pushed at once',
    );
    await batches.end(ids[1]!, 'failed', 'boom');
    assert.deepEqual(
      seen.at(-1) && [seen.at(-1)!.rollout.status, seen.at(-1)!.retrying],
      ['failed', true],
      'a failure with attempts left is retried',
    );
    const retry = await batches.next(key, 'w0', () => true);
    assert.equal(retry?.rolloutId, ids[1]);
    await batches.end(ids[1]!, 'succeeded', null);
    await followed;
    assert.equal(seen.length, 3);
    assert.equal(cancelled, 0);
    const page = await batches.events(batch.id, 0, 0);
    assert.deepEqual([page.events, page.done], [[], true], 'delivered to the follower, not buffered');
  });

  it('tells the follower once when someone else cancels, then ends', async (t) => {
    const { batches, store, ids, batch } = setUp(t, 3);
    let cancelled = 0;
    const followed = batches.follow(batch.id, { onAttempt: () => undefined, onCancelled: () => (cancelled += 1) });
    assert.equal(await batches.cancel(batch.id), 3);
    await followed;
    assert.equal(cancelled, 1);
    assert.deepEqual(
      ids.map((id) => store.getRollout(id).status),
      ['cancelled', 'cancelled', 'cancelled'],
    );
  });

  it('fails the follow when the daemon stops before the batch is done', async (t) => {
    const { batches, batch } = setUp(t, 1);
    const followed = batches.follow(batch.id, { onAttempt: () => undefined, onCancelled: () => undefined });
    batches.dispose();
    await assert.rejects(followed, /the daemon is stopping/);
  });

  it('records the Ray node a worker runs on with each attempt it ends, those it ended before it was placed too', async (t) => {
    const { batches, store, ids, batch } = setUp(t, 3);
    const key = new URL(batch.url).pathname.split('/').at(-1)!;
    const nodeA = { nodeId: 'aa', ip: '10.0.0.5', host: 'gpu-1' };
    const nodeB = { nodeId: 'bb', ip: '10.0.0.6', host: 'gpu-2' };
    const early = await batches.next(key, 'w0', () => true);
    await batches.end(early!.rolloutId, 'succeeded', null);
    assert.equal(store.getRolloutDetail(ids[0]!).attempts[0]!.node, undefined, 'not known yet');
    assert.deepEqual(await batches.workerPlaced(batch.id, 'w0', nodeA), { placed: true });
    await batches.workerPlaced(batch.id, 'w1', nodeB);
    const second = await batches.next(key, 'w1', () => true);
    await batches.end(second!.rolloutId, 'failed', 'boom');
    const third = await batches.next(key, 'w0', () => true);
    await batches.end(third!.rolloutId, 'succeeded', null);
    assert.deepEqual(
      ids.map((id) => store.getRolloutDetail(id).attempts.map((a) => a.node)),
      [[nodeA], [nodeB], [nodeA]],
    );
  });
});

describe('a worker batch whose runner died', () => {
  it('stops its workers (204), fails the attempts in flight and leaves the queued rollouts queued, for --resume', async (t) => {
    const { store, batches, ids, batch } = setUp(t, 3, 2, 200);
    const key = new URL(batch.url).pathname.split('/').at(-1)!;
    const running = await batches.next(key, 'w0', () => true);
    assert.equal(running?.rolloutId, ids[0]);
    // No runner polls `workerBatches/events` (it was killed): past the lease, the daemon stops the batch.
    await waitFor(() => store.getRollout(ids[0]!).status === 'failed', 'the attempt in flight ended', 5_000);
    assert.equal(await batches.next(key, 'w1', () => true), null, 'a worker asking for more gets 204');
    const rollouts = ids.map((id) => store.getRollout(id));
    assert.deepEqual(
      rollouts.map((rollout) => [rollout.status, rollout.error]),
      [
        ['failed', 'the runner stopped during this attempt'],
        ['queued', null],
        ['queued', null],
      ],
      'nothing cancelled: `dataset run --resume` finds every rollout still to run',
    );
    assert.equal(store.findAgentKey(running!.url.split('/r/')[1]!), undefined, 'its key is revoked');
    await waitFor(() => !batches.knows(key), 'the batch forgotten', 5_000);
  });
});

describe('a worker batch resumed before the dead runner’s batch ended', () => {
  it('holds its rollouts alone: the old batch neither ends nor times out the attempts the new one runs', async (t) => {
    const { store, batches, ids, batch: old } = setUp(t, 2, 2, 200);
    const keyOf = (url: string): string => new URL(url).pathname.split('/').at(-1)!;
    assert.equal((await batches.next(keyOf(old.url), 'w0', () => true))?.rolloutId, ids[0]);
    // The runner died; `dataset run --resume` fails the attempt it left running and queues it again, at once.
    store.transitionRollout(parsed('transitionRollout', { id: ids[0]!, to: 'failed', error: 'the runner stopped' }));
    store.transitionRollout(parsed('transitionRollout', { id: ids[0]!, to: 'queued' }));
    const resumed = batches.open(batchParams(ids));
    const followed = batches.follow(resumed.id, { onAttempt: () => {}, onCancelled: () => {} });
    assert.equal((await batches.next(keyOf(resumed.url), 'w1', () => true))?.rolloutId, ids[0]);
    // The old batch's lease runs out (its runner never polls again): it holds nothing of the new one's.
    await waitFor(() => !batches.knows(keyOf(old.url)), 'the old batch gone', 5_000);
    assert.deepEqual(
      [store.getRollout(ids[0]!).status, store.getRollout(ids[0]!).attemptCount],
      ['running', 2],
      'the new attempt is untouched',
    );
    assert.equal((await batches.end(ids[0]!, 'succeeded', null)).status, 'succeeded', 'and ends through the new batch');
    assert.equal((await batches.next(keyOf(resumed.url), 'w1', () => true))?.rolloutId, ids[1]);
    await batches.end(ids[1]!, 'succeeded', null);
    await followed;
  });
});

describe('a worker a timeout leaves idle', () => {
  it('is retired: its /next gets 204 while others still get work, and its exit is reported as retired', async (t) => {
    const { store, batches, ids, batch } = setUp(t, 2, 2, undefined, { timeoutMs: 100, concurrencyPerWorker: 1 });
    const events: Array<string | undefined> = [];
    const followed = batches.follow(batch.id, {
      onAttempt: (event) => events.push(event.restartWorker),
      onCancelled: () => {},
    });
    const key = new URL(batch.url).pathname.split('/').at(-1)!;
    assert.equal((await batches.next(key, 'w0', () => true))?.rolloutId, ids[0]);
    await waitFor(() => events.length === 1, 'the timeout');
    assert.deepEqual(events, ['w0'], 'the runner is told to replace w0');
    assert.equal(await batches.next(key, 'w0', () => true), null, 'w0 takes nothing more (204)');
    assert.deepEqual(await batches.workerExited(batch.id, 'w0', 'exited with code 0'), {
      failed: 0,
      done: false,
      retired: true,
    });
    // Its replacement runs the rest, the retry included.
    for (let i = 0; i < 2; i += 1) {
      const next = await batches.next(key, 'w1', () => true);
      await batches.end(next!.rolloutId, 'succeeded', null);
    }
    await followed;
    assert.deepEqual(
      ids.map((id) => store.getRollout(id).status),
      ['succeeded', 'succeeded'],
    );
  });
});
