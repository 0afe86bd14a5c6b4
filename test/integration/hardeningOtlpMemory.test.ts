/**
 * An OTLP export as large as the body cap allows (~120 MB once inflated, under 1 MB of gzip on the wire): decoding
 * it happens in a worker whose heap is bounded (LIGHTNING_OTLP_WORKER_HEAP_MB). Within the bound it is stored
 * whole; past it the worker is stopped and the export refused with a 413 naming the limit. /health answers within
 * a second throughout, and the daemon decodes the next export as before. An export of millions of entries a few bytes
 * each (empty groups, events, JSON objects) is refused as they are counted, before the worker runs out of memory.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { healthProbe, post } from '../helpers/http';
import { BIG_EXPORT_SPANS, bigGzipExport } from '../helpers/otlp';
import { tempDir } from '../helpers/tmp';

const HEADERS = { 'content-type': 'application/json', 'content-encoding': 'gzip' };

describe('an OTLP export near the body cap', () => {
  const cleanups: Array<() => void | Promise<unknown>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });
  let body: { gzip: Buffer; inflated: number };
  before(async () => {
    body = await bigGzipExport();
  });

  async function daemonWith(env: NodeJS.ProcessEnv): Promise<{ daemon: RunningDaemon; client: RpcClient }> {
    const dir = tempDir({ after: (fn) => cleanups.push(fn) });
    const daemon = await startDaemon(path.join(dir, 'store.db'), [], { LIGHTNING_LOG_LEVEL: 'warn', ...env });
    const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
    cleanups.push(
      () => daemon.stop(),
      () => client.dispose(),
    );
    return { daemon, client };
  }

  test(
    'within the decoder heap bound it is stored whole while /health answers within 1 s',
    { timeout: 600_000 },
    async () => {
      assert.ok(body.inflated > 115_000_000 && body.inflated < 128 * 1024 * 1024, `${body.inflated} bytes inflated`);
      const { daemon, client } = await daemonWith({});
      const { rollout, url } = await client.request('startAgentRun', {});
      const probe = healthProbe(daemon.ready.url, 1_000);
      const response = await post(`${url}/v1/traces`, body.gzip, HEADERS);
      const worst = await probe.stop();
      assert.equal(response.status, 200, response.body.slice(0, 500));
      assert.deepEqual(JSON.parse(response.body), {}, 'every span stored');
      assert.equal(
        (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount,
        BIG_EXPORT_SPANS,
      );
      assert.ok(worst < 1_000, `/health took ${worst} ms`);
    },
  );

  test(
    'past the decoder heap bound it is a 413 naming the bound, and the next export is decoded',
    { timeout: 600_000 },
    async () => {
      const { daemon, client } = await daemonWith({ LIGHTNING_OTLP_WORKER_HEAP_MB: '64' });
      const { rollout, url } = await client.request('startAgentRun', {});
      const probe = healthProbe(daemon.ready.url, 1_000);
      const response = await post(`${url}/v1/traces`, body.gzip, HEADERS);
      const worst = await probe.stop();
      assert.equal(response.status, 413, response.body.slice(0, 500));
      assert.match(
        response.body,
        /needs more than the decoder's 64 MiB \(LIGHTNING_OTLP_WORKER_HEAP_MB\); export smaller batches/,
      );
      assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount, 0);
      assert.ok(worst < 1_000, `/health took ${worst} ms`);
      const small = await post(`${url}/v1/traces`, zlib.gzipSync(JSON.stringify({ resourceSpans: [] })), HEADERS);
      assert.equal(small.status, 200, small.body);
    },
  );

  test(
    'millions of tiny entries (empty groups, events, JSON objects: a few KiB of gzip) are a 413 as they are counted, the worker never out of memory',
    { timeout: 600_000 },
    async () => {
      const { daemon, client } = await daemonWith({});
      const { rollout, url } = await client.request('startAgentRun', {});
      const length = (size: number): number[] => {
        const out: number[] = [];
        for (; size >= 0x80; size = Math.floor(size / 0x80)) out.push((size % 0x80) | 0x80);
        return [...out, size];
      };
      const field = (tag: number, inner: Buffer): Buffer =>
        Buffer.concat([Buffer.from([tag, ...length(inner.length)]), inner]);
      // 60 million empty resource groups; one span (its ids and name given) with 8 million empty events.
      const groups = Buffer.alloc(120_000_000, Buffer.from([0x0a, 0x00]));
      const span = Buffer.concat([
        field(0x0a, Buffer.alloc(16, 1)),
        field(0x12, Buffer.alloc(8, 2)),
        field(0x2a, Buffer.from('chat')),
        Buffer.alloc(16_000_000, Buffer.from([0x5a, 0x00])),
      ]);
      const events = field(0x0a, field(0x12, field(0x12, span)));
      const objects = Buffer.from(`{"resourceSpans":[${'{},'.repeat(7_000_000)}{}]}`);
      const bodies = [
        { body: groups, type: 'application/x-protobuf' },
        { body: events, type: 'application/x-protobuf' },
        { body: objects, type: 'application/json' },
      ];
      const probe = healthProbe(daemon.ready.url, 1_000);
      let worst: number;
      try {
        for (const { body, type } of bodies) {
          const response = await post(`${url}/v1/traces`, zlib.gzipSync(body), {
            'content-type': type,
            'content-encoding': 'gzip',
          });
          assert.equal(response.status, 413, `${type}: ${response.body.slice(0, 500)}`);
          assert.match(
            response.body,
            /holds more than \d+ entries .*; export smaller batches \(or raise LIGHTNING_OTLP_WORKER_HEAP_MB\)/,
          );
        }
      } finally {
        worst = await probe.stop();
      }
      assert.doesNotMatch(daemon.stderr(), /decode worker failed/, 'no worker ran out of memory');
      assert.ok(worst < 1_000, `/health took ${worst} ms`);
      const small = await post(`${url}/v1/traces`, zlib.gzipSync(JSON.stringify({ resourceSpans: [] })), HEADERS);
      assert.equal(small.status, 200, small.body);
      assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount, 0);
    },
  );
});
