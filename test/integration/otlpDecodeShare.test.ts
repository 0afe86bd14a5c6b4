/**
 * Which export a free decode worker takes (trainer-daemon/otlp/decodePool.ts), on the bundled worker the daemon runs
 * (dist/otlp-worker.js), read from the pool's state right after each call, not from timing:
 * * a rollout's small exports decode side by side when no other rollout waits (one at a time, every commit of a
 *   busy rollout carried a single export);
 * * a rollout that waits and has no worker goes before another export of a rollout that has one;
 * * a large export never shares: one rollout's heavy exports hold one worker, the other stays for the rest, and a
 *   small export of that rollout waits for its large one.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { silentLogger } from '../../trainer-daemon/log';
import { DecodePool, SHARED_DECODE_MAX_BYTES, type DecodedExport } from '../../trainer-daemon/otlp/decodePool';
import type { ExportSecrets } from '../../trainer-daemon/otlp/prepare';
import { REPO_ROOT } from '../helpers/daemon';
import { encode, oneSpan } from '../helpers/otlp';

const WORKER = path.join(REPO_ROOT, 'dist', 'otlp-worker.js');
const LIMITS = { maxBytes: 64 * 1024 * 1024, maxSpans: 100_000 };

/** Which source each worker is busy with now (undefined: idle): not part of the pool's surface, read to see it. */
function busyWith(pool: DecodePool): Array<string | undefined> {
  return (pool as unknown as { slots: Array<{ job?: { source: string } }> }).slots.map((slot) => slot.job?.source);
}

/** A pool of two workers on the bundled decoder, closed after the test. */
function twoWorkerPool(t: TestContext): DecodePool {
  const pool = new DecodePool({ logger: silentLogger, workerFile: WORKER, size: 2 });
  t.after(() => pool.close());
  return pool;
}

const small = (): Buffer => encode(oneSpan('chat m', { 'gen_ai.operation.name': 'chat' }), 'protobuf');

/** An OTLP/JSON export just over the size that may share workers. */
function large(): Buffer {
  const body = Buffer.from(
    JSON.stringify({
      resourceSpans: [
        {
          resource: { attributes: [] },
          scopeSpans: [
            {
              spans: [
                {
                  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
                  spanId: '00f067aa0ba902b7',
                  name: 'chat m',
                  kind: 3,
                  startTimeUnixNano: '1700000000000000000',
                  endTimeUnixNano: '1700000000100000000',
                  attributes: [
                    { key: 'gen_ai.prompt', value: { stringValue: 'p'.repeat(SHARED_DECODE_MAX_BYTES + 1024) } },
                  ],
                },
              ],
            },
          ],
        },
      ],
    }),
  );
  assert.ok(body.length > SHARED_DECODE_MAX_BYTES);
  return body;
}

function decode(
  pool: DecodePool,
  source: string,
  body: Buffer,
  scrub = (): ExportSecrets => ({ rolloutId: source, secrets: [] }),
): DecodedExport {
  const binary = body[0] !== 0x7b;
  return pool.decode(source, [body], binary ? 'application/x-protobuf' : 'application/json', undefined, LIMITS, scrub);
}

/** Reads an export to its end: how many spans it held. */
async function drain(decoded: DecodedExport): Promise<number> {
  let spans = 0;
  for (let part = await decoded.next(); part !== null; part = await decoded.next()) spans += part.spans.length;
  decoded.close();
  return spans;
}

test('a rollout’s small exports decode side by side when no other rollout waits, and each is decoded whole', async (t) => {
  const pool = twoWorkerPool(t);
  const first = decode(pool, 'rollout-a', small());
  const second = decode(pool, 'rollout-a', small());
  assert.deepEqual(busyWith(pool), ['rollout-a', 'rollout-a'], 'both workers took one of rollout-a’s exports');
  assert.deepEqual(await Promise.all([drain(first), drain(second)]), [1, 1]);
});

test('a waiting rollout without a worker goes before another export of a rollout that has one', async (t) => {
  const pool = twoWorkerPool(t);
  const a1 = decode(pool, 'rollout-a', small());
  const a2 = decode(pool, 'rollout-a', small());
  // Both workers busy: these two wait, rollout-a's first.
  const a3 = decode(pool, 'rollout-a', small());
  const b1 = decode(pool, 'rollout-b', small());
  assert.deepEqual(busyWith(pool), ['rollout-a', 'rollout-a']);
  // The first worker to finish takes rollout-b's export, though rollout-a's third came before it: rollout-a still
  // has a worker. (Both may finish before this reads the pool: then the other took rollout-a's third.)
  const firstParts = [a1.next(), a2.next()];
  await Promise.race(firstParts);
  assert.ok(busyWith(pool).includes('rollout-b'), `rollout-b was served at the first free worker: ${busyWith(pool)}`);
  const [p1, p2] = await Promise.all(firstParts);
  assert.deepEqual([p1?.spans.length, p2?.spans.length], [1, 1]);
  assert.deepEqual(await Promise.all([drain(a1), drain(a2), drain(a3), drain(b1)]), [0, 0, 1, 1]);
});

test('a large export never shares: one rollout’s large exports hold one worker, the other is left for the rest', async (t) => {
  const pool = twoWorkerPool(t);
  const big1 = decode(pool, 'rollout-a', large());
  const big2 = decode(pool, 'rollout-a', large());
  assert.deepEqual(busyWith(pool), ['rollout-a'], 'the second large export waits; no worker was started for it');
  // A small export of rollout-a waits behind its large one too: the worker decoding a large export is not shared.
  const small1 = decode(pool, 'rollout-a', small());
  assert.deepEqual(busyWith(pool), ['rollout-a']);
  const other = decode(pool, 'rollout-b', small());
  assert.deepEqual(busyWith(pool), ['rollout-a', 'rollout-b'], 'another rollout’s export got the other worker');
  assert.deepEqual(await Promise.all([drain(big1), drain(big2), drain(small1), drain(other)]), [1, 1, 1, 1]);
});

test('a small export waits while its rollout’s large export is decoded', async (t) => {
  const pool = twoWorkerPool(t);
  const big = decode(pool, 'rollout-a', large());
  // The large body moved to the worker as it was dispatched: its size is still known to the pool.
  // Its spans are scrubbed with the rollout's secrets as they are when its decoding starts, not as it came.
  const asked: string[][] = [];
  const secrets = ['opaque-known-when-queued'];
  const after = decode(pool, 'rollout-a', small(), () => {
    asked.push([...secrets]);
    return { rolloutId: 'rollout-a', secrets };
  });
  assert.deepEqual(busyWith(pool), ['rollout-a'], 'the small export did not take the idle worker');
  secrets.unshift('opaque-learned-while-it-waited');
  assert.deepEqual(await Promise.all([drain(big), drain(after)]), [1, 1]);
  assert.deepEqual(asked, [['opaque-learned-while-it-waited', 'opaque-known-when-queued']]);
});
