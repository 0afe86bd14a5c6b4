// needs: root
/**
 * A full disk (a 3 MiB tmpfs under the store, filled up): writes are refused with a retryable 503
 * and Retry-After — never a 200 whose spans were all dropped — and go through again once there is
 * space. Mounting needs root; without it the test says so and is skipped.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';
import { post } from '../helpers/http';

function spans(rolloutId: string, first: number, count: number): string {
  const list = Array.from({ length: count }, (_, i) => ({
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: `c${(first + i).toString(16).padStart(15, '0')}`,
    name: 'step',
    kind: 1,
    startTimeUnixNano: '1700000000000000000',
    endTimeUnixNano: '1700000000100000000',
    attributes: [{ key: 'pad', value: { stringValue: 'x'.repeat(2_000) } }],
  }));
  return JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'lightning.rollout_id', value: { stringValue: rolloutId } }] },
        scopeSpans: [{ spans: list }],
      },
    ],
  });
}

/** Writes zeros until the filesystem is full. */
function fill(file: string): void {
  const fd = fs.openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  try {
    for (let i = 0; i < 10_000; i += 1) fs.writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  } finally {
    fs.closeSync(fd);
  }
}

test('a full disk: OTLP and /reward get 503 with Retry-After, nothing half-written, and work again once there is space', async (t) => {
  const mount = path.join(tempDir(t), 'small');
  fs.mkdirSync(mount);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', mount], { stdio: 'ignore' });
  } catch {
    t.skip('mounting a tmpfs needs root (mount -t tmpfs); the full-disk path was not exercised');
    return;
  }
  const daemon = await startDaemon(path.join(mount, 'store.db')).catch((error: unknown) => {
    execFileSync('umount', [mount]);
    throw error;
  });
  try {
    const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
    const { rollout, url } = await client.request('startAgentRun', {});
    fill(path.join(mount, 'filler'));
    const full = await post(`${url}/v1/traces`, spans(rollout.id, 1, 200), { 'content-type': 'application/json' });
    assert.equal(full.status, 503, full.body);
    assert.equal(full.retryAfter, '1');
    assert.match(full.body, /disk is full/);
    const reward = await post(`${url}/reward`, JSON.stringify({ value: 1 }), { 'content-type': 'application/json' });
    assert.ok(reward.status === 503 || reward.status === 200, `${reward.status} ${reward.body}`);
    fs.rmSync(path.join(mount, 'filler'));
    const retried = await post(`${url}/v1/traces`, spans(rollout.id, 1, 200), { 'content-type': 'application/json' });
    assert.equal(retried.status, 200, retried.body);
    const stored = (await client.request('getRollout', { id: rollout.id })).spans.length;
    assert.equal(stored, 200, `the retried batch is all there, once (${retried.body})`);
    client.dispose();
  } finally {
    await daemon.stop('SIGKILL');
    execFileSync('umount', [mount]);
  }
});
