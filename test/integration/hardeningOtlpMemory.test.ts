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
    'entries a few bytes each (empty groups, events, JSON objects) past the decoder heap bound are a 413 as they are counted, and under it decode; protobuf attributes are not counted',
    { timeout: 600_000 },
    async () => {
      // A 64 MiB decoder takes 209,715 protobuf entries, and JSON worth 32 MiB decoded (400 bytes an entry, 240 an
      // attribute) of at most 419,430 objects and arrays (protobufWire.ts#decodeBudget, decode.ts).
      const { daemon, client } = await daemonWith({ LIGHTNING_OTLP_WORKER_HEAP_MB: '64' });
      const { rollout, url } = await client.request('startAgentRun', {});
      const length = (size: number): number[] => {
        const out: number[] = [];
        for (; size >= 0x80; size = Math.floor(size / 0x80)) out.push((size % 0x80) | 0x80);
        return [...out, size];
      };
      const field = (tag: number, inner: Buffer): Buffer =>
        Buffer.concat([Buffer.from([tag, ...length(inner.length)]), inner]);
      const time = (tag: number): Buffer => Buffer.concat([Buffer.from([tag]), Buffer.alloc(8, 1)]);
      /** A span with its ids, name and times, then `rest` (attributes, events). */
      const span = (id: number, rest: Buffer): Buffer => {
        const spanId = Buffer.alloc(8);
        spanId.writeUInt32BE(id + 1, 4);
        return field(
          0x12,
          Buffer.concat([
            field(0x0a, Buffer.alloc(16, 1)),
            field(0x12, spanId),
            field(0x2a, Buffer.from('chat')),
            time(0x39),
            time(0x41),
            rest,
          ]),
        );
      };
      const inScope = (spans: Buffer): Buffer => field(0x0a, field(0x12, spans));
      const groups = (count: number): Buffer => Buffer.alloc(2 * count, Buffer.from([0x0a, 0x00]));
      const jsonGroups = (count: number): Buffer => Buffer.from(`{"resourceSpans":[${'{},'.repeat(count - 1)}{}]}`);
      const jsonSpan = (attributes: string): string =>
        `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"${'01'.repeat(16)}","spanId":"${'02'.repeat(8)}","name":"chat","startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[${attributes}]}]}]}]}`;
      // 2,000 spans of 150 attributes each: 300,000 attributes, past the budget were they counted.
      const attribute = (index: number): Buffer =>
        field(0x4a, Buffer.concat([field(0x0a, Buffer.from(`key.${index}`)), field(0x12, Buffer.from([0x18, 0x01]))]));
      const attributes = Buffer.concat(Array.from({ length: 150 }, (_, index) => attribute(index)));
      const manyAttributes = inScope(
        Buffer.concat(Array.from({ length: 2_000 }, (_, index) => span(index, attributes))),
      );
      const protobuf = 'application/x-protobuf';
      const json = 'application/json';
      const asDecoded = (budget: string) =>
        new RegExp(
          `${budget}, more than its decoder's heap holds decoded; export smaller batches \\(or raise LIGHTNING_OTLP_WORKER_HEAP_MB\\)`,
        );
      const protobufEntries = asDecoded('holds more than 209715 resource and scope groups, spans and events');
      const past = [
        {
          what: 'protobuf: 400,000 empty resource groups',
          body: groups(400_000),
          type: protobuf,
          expected: protobufEntries,
        },
        {
          what: 'protobuf: a span with 400,000 empty events',
          body: inScope(span(0, Buffer.alloc(800_000, Buffer.from([0x5a, 0x00])))),
          type: protobuf,
          expected: protobufEntries,
        },
        {
          what: 'JSON: 200,000 empty resource groups',
          body: jsonGroups(200_000),
          type: json,
          expected:
            /JSON export's 200000 resource and scope groups, spans and events and 0 attributes and values take more than its decoder's heap holds decoded \(~77 MiB needed, 32 MiB allowed: half the decoder's heap\); export smaller batches \(or raise LIGHTNING_OTLP_WORKER_HEAP_MB\)/,
        },
        {
          what: 'JSON: a span of 150,000 empty attributes',
          body: Buffer.from(jsonSpan('{},'.repeat(149_999) + '{}')),
          type: json,
          expected:
            /JSON export's 3 resource and scope groups, spans and events and 150000 attributes and values take more than/,
        },
        {
          what: 'JSON: one attribute holding 150,000 pairs in a key-value list',
          body: Buffer.from(
            jsonSpan(
              `{"key":"k","value":{"kvlistValue":{"values":[${Array.from({ length: 150_000 }, (_, i) => `{"key":"k${i}","value":{}}`).join(',')}]}}}`,
            ),
          ),
          type: json,
          expected:
            /JSON export's 3 resource and scope groups, spans and events and 150001 attributes and values take more than/,
        },
        {
          what: 'JSON: a span with a million empty attributes (past what JSON.parse may make)',
          body: Buffer.from(jsonSpan('{},'.repeat(999_999) + '{}')),
          type: json,
          expected:
            /holds more than 419430 objects and arrays, more than its decoder's heap holds parsed; export smaller batches \(or raise LIGHTNING_OTLP_WORKER_HEAP_MB\)/,
        },
      ];
      const under = [
        { what: 'protobuf: 150,000 empty resource groups', body: groups(150_000), type: protobuf, spans: 0 },
        { what: 'JSON: 60,000 empty resource groups', body: jsonGroups(60_000), type: json, spans: 0 },
        { what: 'protobuf: 2,000 spans of 150 attributes', body: manyAttributes, type: protobuf, spans: 2_000 },
        {
          what: 'JSON: a span whose attribute holds a million brackets',
          body: Buffer.from(jsonSpan(`{"key":"text","value":{"stringValue":"${'{['.repeat(500_000)}"}}`)),
          type: json,
          spans: 1,
        },
      ];
      // Compressed before the probe starts: it times this process's event loop too.
      const gzip = <T extends { body: Buffer }>(list: T[]) =>
        list.map((item) => ({ ...item, body: zlib.gzipSync(item.body) }));
      const [pastGzip, underGzip] = [gzip(past), gzip(under)];
      const send = (body: Buffer, type: string) =>
        post(`${url}/v1/traces`, body, { 'content-type': type, 'content-encoding': 'gzip' });
      const probe = healthProbe(daemon.ready.url, 1_000);
      let worst: number;
      let stored = 0;
      try {
        for (const { what, body, type, expected } of pastGzip) {
          const response = await send(body, type);
          assert.equal(response.status, 413, `${what}: ${response.body.slice(0, 500)}`);
          assert.match(response.body, expected, what);
        }
        for (const { what, body, type, spans } of underGzip) {
          const response = await send(body, type);
          assert.equal(response.status, 200, `${what}: ${response.body.slice(0, 500)}`);
          stored += spans;
        }
      } finally {
        worst = await probe.stop();
      }
      assert.doesNotMatch(daemon.stderr(), /decode worker failed/, 'no worker ran out of memory');
      assert.ok(worst < 1_000, `/health took ${worst} ms`);
      assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount, stored);
    },
  );
});
