/**
 * How a starter reads `lightning serve`'s first lines (extension/startLines.ts, the supervisor's wait): the ready line,
 * startup-failed, and the longer wait once serve says it upgrades a store an earlier Lightning wrote.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { awaitStartLine, type StartOutcome } from '../../extension/startLines';
import type { StoreUpgrading } from '../../trainer-daemon/protocol/cliLines';

const READY = { event: 'ready', url: 'http://127.0.0.1:4000', token: 't'.repeat(32), store: '/s/store.db', pid: 7 };
const UPGRADE: StoreUpgrading = { event: 'store-upgrading', from: 11, to: 12, spans: 2_000_000 };

function start(
  readyMs: number,
  upgradeMs: number,
): {
  stdout: PassThrough;
  outcome: Promise<StartOutcome>;
  upgrades: StoreUpgrading[];
} {
  const stdout = new PassThrough();
  const upgrades: StoreUpgrading[] = [];
  const outcome = awaitStartLine(stdout, { readyMs, upgradeMs, onUpgrading: (line) => upgrades.push(line) });
  return { stdout, outcome, upgrades };
}

const line = (value: unknown): string => `${JSON.stringify(value)}\n`;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test('the ready line; startup-failed; a line that is neither', async () => {
  const ready = start(5_000, 5_000);
  ready.stdout.write(line(READY));
  assert.deepEqual(await ready.outcome, { kind: 'ready', ready: READY });
  const failed = start(5_000, 5_000);
  const why = { event: 'startup-failed', reason: 'store_owned', kind: 'conflict', message: 'owned' };
  failed.stdout.write(line(why));
  assert.deepEqual(await failed.outcome, { kind: 'failed', failed: why });
  const other = start(5_000, 5_000);
  other.stdout.write('Usage: lightning [options]\n');
  assert.deepEqual(await other.outcome, { kind: 'unexpected', line: 'Usage: lightning [options]' });
  assert.deepEqual(ready.upgrades, []);
});

test('no line in time is a timeout; stdout ending first is closed', async () => {
  assert.deepEqual(await start(50, 5_000).outcome, { kind: 'timeout', seconds: 0.05, upgrading: false });
  const closed = start(5_000, 5_000);
  closed.stdout.end();
  assert.deepEqual(await closed.outcome, { kind: 'closed' });
});

test('after store-upgrading the ready line may come later than the first wait allows, within the upgrade’s', async () => {
  const upgrading = start(100, 5_000);
  upgrading.stdout.write(line(UPGRADE));
  await sleep(300); // Past the first wait: the upgrade's wait now runs.
  upgrading.stdout.write(line(READY));
  assert.deepEqual(await upgrading.outcome, { kind: 'ready', ready: READY });
  assert.deepEqual(upgrading.upgrades, [UPGRADE]);

  const stuck = start(5_000, 100);
  stuck.stdout.write(line(UPGRADE));
  assert.deepEqual(await stuck.outcome, { kind: 'timeout', seconds: 0.1, upgrading: true });
  // serve prints one upgrading line: a second is not serve's.
  const twice = start(5_000, 200);
  twice.stdout.write(line(UPGRADE));
  await sleep(120);
  twice.stdout.write(line(UPGRADE));
  assert.deepEqual(await twice.outcome, { kind: 'unexpected', line: JSON.stringify(UPGRADE) });
});
