/**
 * OTLP bodies that cost far more than they weigh (issue 28): a gzip that inflates past the cap, JSON nested
 * thousands deep, a heavy export whose client leaves. Each is answered (413, 400) or dropped, the daemon's work
 * for it stops, and /health answers within a second throughout.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { healthProbe, post } from '../helpers/http';
import { tempDir, waitFor } from '../helpers/tmp';

const MiB = 1024 * 1024;

/** An OTLP/JSON export of `count` spans, each with a `chars`-long prompt attribute. */
function exportOf(count: number, chars: number): string {
  const prompt = 'p'.repeat(chars);
  const spans = Array.from({ length: count }, (_, i) => ({
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: (i + 1).toString(16).padStart(16, '0'),
    name: 'chat m',
    kind: 3,
    startTimeUnixNano: '1700000000000000000',
    endTimeUnixNano: '1700000000100000000',
    attributes: [
      { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } },
      { key: 'gen_ai.prompt', value: { stringValue: prompt } },
    ],
  }));
  return JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ spans }] }] });
}

describe('OTLP bodies past their limits', () => {
  let daemon: RunningDaemon;
  let client: RpcClient;
  const cleanups: Array<() => void> = [];
  before(async () => {
    const dir = tempDir({ after: (fn) => cleanups.push(fn) });
    daemon = await startDaemon(path.join(dir, 'store.db'), [], {
      LIGHTNING_LOG_LEVEL: 'debug',
      LIGHTNING_MAX_OTLP_BYTES: String(16 * MiB),
    });
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    for (const cleanup of cleanups) cleanup();
  });

  test('a gzip that inflates past LIGHTNING_MAX_OTLP_BYTES is a 413 naming the limit; /health answers meanwhile', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    // 256 MiB of zeros is ~256 KiB of gzip: inflating it whole would hold all of it.
    const bomb = zlib.gzipSync(Buffer.alloc(256 * MiB), { level: 1 });
    const probe = healthProbe(daemon.ready.url, 1_000);
    const response = await post(`${url}/v1/traces`, bomb, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    });
    assert.equal(response.status, 413, response.body);
    assert.match(response.body, /over the 16777216-byte limit once decompressed/);
    assert.ok((await probe.stop()) < 1_000);
    assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount, 0);
  });

  test('OTLP JSON nested 20,000 levels deep is a 400 naming the depth, not a 500', async () => {
    const { url } = await client.request('startAgentRun', {});
    const depth = 20_000;
    const value = `${'{"kvlistValue":{"values":[{"key":"k","value":'.repeat(depth)}{"stringValue":"x"}${'}]}}'.repeat(depth)}`;
    const body = `{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7","name":"deep","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"deep","value":${value}}]}]}]}]}`;
    for (const [encoding, bytes] of [
      ['identity', Buffer.from(body)],
      ['gzip', zlib.gzipSync(body)],
    ] as const) {
      const response = await post(`${url}/v1/traces`, bytes, {
        'content-type': 'application/json',
        'content-encoding': encoding,
      });
      assert.equal(response.status, 400, `${encoding}: ${response.body.slice(0, 300)}`);
      assert.match(response.body, /nested deeper than 256 levels/);
    }
    assert.doesNotMatch(daemon.stderr(), /Maximum call stack/);
  });

  test('a heavy export whose client leaves mid-decode is dropped: its worker stops, none of its spans are stored later', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    // ~13 MiB once inflated (under the cap), 14,000 spans: seconds of decoding and storing.
    const heavy = zlib.gzipSync(exportOf(14_000, 600));
    const probe = healthProbe(daemon.ready.url, 1_000);
    const request = http.request(`${url}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    });
    request.on('error', () => undefined);
    request.end(heavy);
    await waitFor(
      () => daemon.stderr().includes(`"msg":"decoding an OTLP export","source":"${rollout.id}"`),
      `the daemon decoding the export: ${daemon.stderr().slice(-3000)}`,
      30_000,
    );
    request.destroy();
    await waitFor(
      () => /dropped while decoding|OTLP export was cancelled/.test(daemon.stderr()),
      'the daemon dropping the export',
      30_000,
    );
    const stored = (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount;
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const later = (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount;
    assert.equal(later, stored, 'nothing of the export is stored after it was dropped');
    assert.ok(later < 14_000, `the export was not stored whole (${later} spans)`);
    assert.ok((await probe.stop()) < 1_000);
    // The daemon decodes the next export as before (a fresh worker took the stopped one's place).
    const small = await post(`${url}/v1/traces`, exportOf(3, 10), { 'content-type': 'application/json' });
    assert.equal(small.status, 200, small.body);
  });
});
