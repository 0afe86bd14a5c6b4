import assert from 'node:assert/strict';
import { test } from 'node:test';
import { lockBatch } from '../../trainer-daemon/runner/batchLock';
import { tempDir } from '../helpers/tmp';

test("a batch's lock is held by one taker at a time, and taken again once released", (t) => {
  const dir = tempDir(t);
  const first = lockBatch(dir);
  assert.equal(first.held, true);
  const second = lockBatch(dir);
  assert.deepEqual(second, { held: false, reason: 'taken' });
  if (first.held) first.release();
  const third = lockBatch(dir);
  assert.equal(third.held, true);
  if (third.held) third.release();
});

test('a lock that cannot be opened (its folder is missing) says why instead of throwing', (t) => {
  const lock = lockBatch(`${tempDir(t)}/missing`);
  assert.equal(lock.held, false);
  assert.equal(!lock.held && lock.reason, 'unavailable');
});
