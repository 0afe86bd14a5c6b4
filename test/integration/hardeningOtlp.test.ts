/**
 * OTLP fairness against a real daemon: one rollout's heavy export (seconds of decoding) does not
 * hold up another rollout's small one, and the heavy one is still stored whole.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { post } from '../helpers/http';
import { tempDir, waitFor } from '../helpers/tmp';

/** An OTLP/JSON export of `count` LLM spans, each with a `chars`-long prompt attribute. */
function exportOf(count: number, chars: number, first = 1): string {
  const prompt = 'p'.repeat(chars);
  const spans = Array.from({ length: count }, (_, i) => ({
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: (first + i).toString(16).padStart(16, '0'),
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

describe('OTLP decoding is fair between rollouts', () => {
  let daemon: RunningDaemon;
  let client: RpcClient;
  const cleanups: Array<() => void> = [];
  before(async () => {
    const dir = tempDir({ after: (fn) => cleanups.push(fn) });
    // Debug logs say when the daemon starts decoding an export: the test waits on that event.
    daemon = await startDaemon(path.join(dir, 'store.db'), [], { LIGHTNING_LOG_LEVEL: 'debug' });
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    for (const cleanup of cleanups) cleanup();
  });

  test("a small export from rollout B is answered while rollout A's heavy export is still being decoded and stored", async () => {
    const a = await client.request('startAgentRun', { label: 'heavy' });
    const b = await client.request('startAgentRun', { label: 'small' });
    const heavySpans = 60_000;
    // ~40 MiB once decompressed, under 1 MiB on the wire: seconds of decoding for one export.
    const heavy = zlib.gzipSync(exportOf(heavySpans, 600));
    const order: string[] = [];
    const heavyAnswer = post(`${a.url}/v1/traces`, heavy, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    }).then((result) => {
      order.push('A');
      return result;
    });
    await waitFor(
      () => daemon.stderr().includes(`"msg":"decoding an OTLP export","source":"${a.rollout.id}"`),
      "the daemon decoding rollout A's export",
      30_000,
    );

    const small = await post(`${b.url}/v1/traces`, exportOf(1, 10, 1_000_000), { 'content-type': 'application/json' });
    order.push('B');
    assert.equal(small.status, 200, small.body);
    assert.deepEqual(JSON.parse(small.body), {}, 'B: every span stored');
    assert.equal((await client.request('getRollout', { id: b.rollout.id, spans: false })).rollout.spanCount, 1);

    const heavyResult = await heavyAnswer;
    assert.deepEqual(order, ['B', 'A'], "B's export is answered before A's heavy one");
    assert.equal(heavyResult.status, 200, heavyResult.body.slice(0, 500));
    assert.deepEqual(JSON.parse(heavyResult.body), {}, 'A: every span stored');
    assert.equal(
      (await client.request('getRollout', { id: a.rollout.id, spans: false })).rollout.spanCount,
      heavySpans,
    );
  });
});
