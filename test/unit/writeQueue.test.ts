import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { silentLogger } from '../../trainer-daemon/log';
import type { NotificationName } from '../../trainer-daemon/protocol';
import { ChangeNotifier } from '../../trainer-daemon/rpc/notifier';
import { PayloadTooLargeError, StorageUnavailableError } from '../../trainer-daemon/protocol/errors';
import { asStorageError, OverloadedError, WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { Store } from '../../trainer-daemon/store/store';
import { openConnection } from '../../trainer-daemon/store/driver';
import { llmSpan } from '../helpers/spans';
import { tempDir, waitFor } from '../helpers/tmp';
import { openStore } from '../helpers/store';
import { parsed } from '../helpers/params';

describe('group commit (WriteQueue)', () => {
  test('writes submitted in one turn of the event loop commit in one transaction, and resolve after the commit', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger);
    const rollouts = [
      store.createRollout(parsed('createRollout', {})).id,
      store.createRollout(parsed('createRollout', {})).id,
    ];
    let commits = 0;
    store.onDidAddSpans(() => (commits += 1));
    const pending = Array.from({ length: 50 }, (_, i) =>
      writes.submit(() => store.addSpans({ rolloutId: rollouts[i % 2]!, spans: [llmSpan()] }), 1),
    );
    assert.equal(store.getRollout(rollouts[0]!).spanCount, 0, 'nothing is written synchronously');
    const results = await Promise.all(pending);
    assert.equal(commits, 1, 'one commit, announced once');
    assert.ok(results.every((r) => r.results[0]!.kind === 'stored'));
    assert.equal(store.getRollout(rollouts[0]!).spanCount + store.getRollout(rollouts[1]!).spanCount, 50);
  });

  test('span writes for one rollout merge into one batch; each caller gets its own results', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger);
    const a = store.createRollout(parsed('createRollout', {})).id;
    const b = store.createRollout(parsed('createRollout', {})).id;
    let commits = 0;
    store.onDidAddSpans(() => (commits += 1));
    const first = [llmSpan(), llmSpan()];
    const second = [llmSpan(), first[0]!];
    const [r1, r2, r3, missing] = await Promise.allSettled([
      writes.submitSpans(a, first),
      writes.submitSpans(a, second),
      writes.submitSpans(b, [llmSpan()]),
      writes.submitSpans('ro-missing', [llmSpan()]),
    ]);
    assert.equal(commits, 1);
    assert.deepEqual(
      (r1 as PromiseFulfilledResult<Array<{ kind: string; sequence?: number }>>).value.map((r) => [r.kind, r.sequence]),
      [
        ['stored', 1],
        ['stored', 2],
      ],
    );
    assert.deepEqual(
      (r2 as PromiseFulfilledResult<Array<{ kind: string; sequence?: number }>>).value.map((r) => [r.kind, r.sequence]),
      [
        ['stored', 3],
        ['duplicate', undefined],
      ],
    );
    assert.equal((r3 as PromiseFulfilledResult<Array<{ kind: string }>>).value[0]!.kind, 'stored');
    assert.equal(missing.status, 'rejected');
    assert.equal(store.getRollout(a).spanCount, 3);
  });

  test('a failing write rolls back only its own changes; the others in the group commit', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger);
    const changed: string[][] = [];
    store.onDidChangeRollouts((ids) => changed.push([...ids]));
    const created = writes.submit(() => store.createRollout(parsed('createRollout', { label: 'kept' })));
    const failing = writes.submit(() => {
      store.createRollout(parsed('createRollout', { label: 'rolled back' }));
      return store.transitionRollout(parsed('transitionRollout', { id: 'ro-missing', to: 'running' }));
    });
    const reward = created.then((r) =>
      writes.submit(() => store.addReward(parsed('addReward', { rolloutId: r.id, value: 1 }))),
    );
    await assert.rejects(failing, /ro-missing does not exist/);
    const rollout = await created;
    await reward;
    const labels = store.listRollouts(parsed('listRollouts', {})).items.map((r) => r.label);
    assert.deepEqual(labels, ['kept'], 'the failed write left nothing behind');
    assert.equal(store.getRollout(rollout.id).reward, 1);
    assert.deepEqual(changed.flat().sort(), [rollout.id, rollout.id], 'only committed changes are announced');
  });

  test('a group of one failing write leaves nothing behind and announces nothing; the next write commits', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger);
    const changed: string[][] = [];
    store.onDidChangeRollouts((ids) => changed.push([...ids]));
    await assert.rejects(
      writes.submit(() => {
        store.createRollout(parsed('createRollout', { label: 'rolled back' }));
        return store.transitionRollout(parsed('transitionRollout', { id: 'ro-missing', to: 'running' }));
      }),
      /ro-missing does not exist/,
    );
    assert.deepEqual(store.listRollouts(parsed('listRollouts', {})).items, [], 'its first change was rolled back');
    assert.deepEqual(changed, [], 'and not announced');
    // The queue goes on: the next group of one commits and is announced.
    const kept = await writes.submit(() => store.createRollout(parsed('createRollout', { label: 'kept' })));
    assert.deepEqual(changed, [[kept.id]]);
    assert.deepEqual(
      store.listRollouts(parsed('listRollouts', {})).items.map((r) => r.label),
      ['kept'],
    );
  });

  test('the queue is bounded, and closed after shutdown', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger, { maxQueued: 10, maxBatchUnits: 100 });
    const { id } = store.createRollout(parsed('createRollout', {}));
    const good = writes.submit(() => store.addSpans({ rolloutId: id, spans: [llmSpan()] }), 1);
    const tooMany = writes.submit(() => store.addSpans({ rolloutId: id, spans: [] }), 10);
    await assert.rejects(tooMany, OverloadedError);
    assert.equal((await good).results[0]!.kind, 'stored');
    writes.shutdown();
    await assert.rejects(
      writes.submit(() => store.createRollout(parsed('createRollout', {}))),
      /shutting down/,
    );
  });

  test('notifications are coalesced to at most one of each kind per interval', async (t) => {
    const store = openStore(t);
    const sent: Array<[NotificationName, unknown]> = [];
    // A flush sends its notifications in one synchronous run: the first of each run starts a flush. (Grouping them by
    // how close in time they were split one flush in two on a loaded machine: 5.1 ms between its two sends.)
    const flushes: number[] = [];
    let flushing = false;
    const notifier = new ChangeNotifier(
      store,
      (name, params) => {
        sent.push([name, params]);
        if (flushing) return;
        flushing = true;
        flushes.push(performance.now());
        queueMicrotask(() => (flushing = false));
      },
      100,
    );
    t.after(() => notifier.dispose());
    const { id } = store.createRollout(parsed('createRollout', { label: 'a' }));
    for (let i = 0; i < 20; i += 1) store.addSpans({ rolloutId: id, spans: [llmSpan()] });
    await waitFor(() => sent.some(([name]) => name === 'spansAdded'), 'the spans flush');
    assert.equal(sent.filter(([name]) => name === 'spansAdded').length, 1, '20 span writes, one spans/added');
    assert.deepEqual(sent.find(([name]) => name === 'spansAdded')![1], {
      rollouts: [{ rolloutId: id, fromSequence: 1, toSequence: 20 }],
    });
    const before = sent.length;
    store.addReward(parsed('addReward', { rolloutId: id, value: 1 }));
    await waitFor(() => sent.length > before, 'the flush after the reward');
    // Flushes are at least the interval apart.
    assert.ok(flushes.length <= 4, `22 changes must coalesce into a few flushes (got ${flushes.length})`);
    flushes
      .slice(1)
      .forEach((time, i) =>
        assert.ok(time - flushes[i]! >= 95, `flushes ${i} and ${i + 1} are ${time - flushes[i]!} ms apart`),
      );
    const last = sent.at(-1)! as [string, { rollouts: Array<{ reward: number | null; spanCount: number }> }];
    assert.equal(last[0], 'rolloutsChanged');
    assert.deepEqual(
      last[1].rollouts.map((r) => [r.reward, r.spanCount]),
      [[1, 20]],
    );
  });

  test('a write of 150,000 spans (under the limit) commits whole: the commit announces them without spreading them into one call', async (t) => {
    const store = openStore(t);
    const writes = new WriteQueue(store, silentLogger);
    const rollout = store.createRollout(parsed('createRollout', {})).id;
    let announced = 0;
    store.onDidAddSpans((spans) => (announced += spans.length));
    const results = await writes.submitSpans(
      rollout,
      Array.from({ length: 150_000 }, () => llmSpan()),
    );
    assert.equal(results.filter((r) => r.kind === 'stored').length, 150_000);
    assert.equal(store.getRollout(rollout).spanCount, 150_000);
    assert.equal(announced, 150_000);
  });

  test("another connection's write lock: the group commit is retried off the event loop and made once released; held past lockWaitMs it fails retryably", async (t) => {
    const dir = tempDir(t);
    const store = Store.open(path.join(dir, 'store.db'), { busyTimeoutMs: 5 });
    t.after(() => store.close());
    const outside = openConnection(path.join(dir, 'store.db'), { readonly: false }).db;
    t.after(() => outside.close());
    const writes = new WriteQueue(store, silentLogger, { lockWaitMs: 60_000 });
    outside.exec('BEGIN IMMEDIATE');
    let made = false;
    const pending = writes
      .submit(() => store.createRollout(parsed('createRollout', { label: 'waits' })))
      .then((rollout) => ((made = true), rollout));
    // The event loop turns while the write waits; the write is not made yet.
    for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(made, false);
    outside.exec('COMMIT');
    assert.equal(store.getRollout((await pending).id).label, 'waits');

    const impatient = new WriteQueue(store, silentLogger, { lockWaitMs: 100 });
    outside.exec('BEGIN IMMEDIATE');
    await assert.rejects(
      impatient.submit(() => store.createRollout(parsed('createRollout', { label: 'never' }))),
      (error: unknown) =>
        error instanceof StorageUnavailableError && /another process holds the store’s write lock/.test(error.message),
    );
    outside.exec('COMMIT');
    assert.equal(
      store.listRollouts(parsed('listRollouts', {})).items.filter((rollout) => rollout.label === 'never').length,
      0,
      'nothing half-written',
    );
  });

  test('a write larger than the queue can ever hold is a 413 at once, not a 503 the caller would retry forever', async (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const writes = new WriteQueue(store, silentLogger, { maxQueued: 10 });
    const id = store.createRollout(parsed('createRollout', {})).id;
    await assert.rejects(
      writes.submitSpans(
        id,
        Array.from({ length: 11 }, () => llmSpan()),
      ),
      (error: Error) => error instanceof PayloadTooLargeError && /smaller batches/.test(error.message),
    );
    assert.equal((await writes.submitSpans(id, [llmSpan()])).length, 1);
  });

  test('a storage failure (full disk, locked file) becomes a retryable StorageUnavailableError that says what to do', () => {
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const mapped = asStorageError(full);
    assert.ok(mapped instanceof StorageUnavailableError && mapped instanceof OverloadedError);
    assert.match((mapped as Error).message, /the disk is full .*retry/);
    assert.match((asStorageError(new Error('database is locked')) as Error).message, /write lock/);
    const other = new Error('no such table');
    assert.equal(asStorageError(other), other);
  });
});
