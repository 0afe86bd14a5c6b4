/**
 * The first OTLP export after a daemon (re)start is not kept waiting while a decode worker starts and loads OTLP's
 * decoder (issue 28: it took 1-3 s): the pool starts one worker as it is made, and that worker is ready — its
 * script, the decoder with it, evaluated and its event loop waiting for work — before any export comes, and it is
 * the one that decodes the first export. Checked on the bundled worker the daemon runs (dist/otlp-worker.js),
 * by state, not by time.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import type { Worker } from 'node:worker_threads';
import { silentLogger } from '../../trainer-daemon/log';
import { DecodePool } from '../../trainer-daemon/otlp/decodePool';
import { REPO_ROOT } from '../helpers/daemon';
import { encode, oneSpan } from '../helpers/otlp';
import { waitFor } from '../helpers/tmp';

const WORKER = path.join(REPO_ROOT, 'dist', 'otlp-worker.js');

/** The pool's workers: not part of its surface, read here to see which worker did what. */
function workersOf(pool: DecodePool): Worker[] {
  return (pool as unknown as { slots: Array<{ worker: Worker }> }).slots.map((slot) => slot.worker);
}

test('a decode worker is started and ready before the first export, and decodes it', async (t) => {
  const pool = new DecodePool({ logger: silentLogger, workerFile: WORKER, size: 2 });
  t.after(() => pool.close());

  const [prestarted, ...others] = workersOf(pool);
  assert.ok(prestarted, 'a worker is started as the pool is made, before any export');
  assert.equal(others.length, 0, 'one: the others start as exports need them');
  // Ready: its script ran to the end (OTLP's decoder is loaded at its top) and its event loop has waited for
  // work, which it only does once that script is done.
  await waitFor(
    () => prestarted.performance.eventLoopUtilization().idle > 0,
    'the pre-started worker to be idle, its decoder loaded',
    60_000,
  );

  const body = encode(oneSpan('first after a restart', { 'tool.name': 'search' }), 'protobuf');
  const decoded = pool.decode(
    'rollout-1',
    [body],
    'application/x-protobuf',
    undefined,
    { maxBytes: 1024 * 1024, maxSpans: 100 },
    () => ({ rolloutId: 'rollout-1', secrets: [] }),
  );
  const part = await decoded.next();
  assert.equal(part?.spans.length, 1);
  assert.equal(await decoded.next(), null);
  decoded.close();
  assert.deepEqual(
    workersOf(pool).map((worker) => worker.threadId),
    [prestarted.threadId],
    'the first export went to the worker that was ready, not to one started for it',
  );
});
