/**
 * The bench table's figures (test/bench/table.ts): a difference keeps one sign (`-33.08`, never `+-33.08`), and a
 * percentile interpolates between the two nearest ranks.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { fmt, percentile, signed } from '../bench/table';

test('bench table: a difference is written with exactly one sign', () => {
  assert.equal(signed(1.034, 2), '+1.03');
  assert.equal(signed(0, 2), '+0.00');
  assert.equal(signed(-0, 2), '+0.00');
  assert.equal(signed(-33.084, 2), '-33.08');
  assert.equal(signed(-1234.5, 1), '-1,234.5');
  assert.equal(fmt(1234.5, 1), '1,234.5');
});

test('bench table: percentiles interpolate between ranks, an empty list has none', () => {
  assert.equal(percentile([4, 1, 3, 2], 50), 2.5);
  assert.equal(percentile([1, 2, 3, 4, 5], 99), 4.96);
  assert.ok(Number.isNaN(percentile([], 50)));
});
