import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { encode, ExportTraceServiceResponse, oneSpan, recordSpans } from '../helpers/otlp';
import { tempDir, waitFor } from '../helpers/tmp';

function post(
  url: string,
  body: Buffer,
  headers: Record<string, string>,
): Promise<{ status: number; type: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: 'POST', headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          type: String(response.headers['content-type']),
          body: Buffer.concat(chunks),
        }),
      );
    });
    request.on('error', reject);
    request.end(body);
  });
}

describe('OTLP/HTTP trace receiver', () => {
  let daemon: RunningDaemon;
  let client: RpcClient;
  before(async () => {
    daemon = await startDaemon(path.join(tempDir({ after }), 'store.db'));
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
  });

  const spansOf = async (id: string, count: number) =>
    waitFor(async () => {
      const { spans } = await client.request('getRollout', { id });
      return spans.length >= count ? spans : undefined;
    }, `${count} span(s)`);

  test('protobuf to the rollout URL: a tool-using trace is stored with categories, parents and tokens; the answer is protobuf', async () => {
    const { rollout, url } = await client.request('startAgentRun', { label: 'otlp' });
    const spans = recordSpans((tracer) => {
      const agent = tracer.startSpan('invoke_agent weather', {
        attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'weather' },
      });
      const inAgent = trace.setSpan(ROOT_CONTEXT, agent);
      const withParent = (
        name: string,
        attributes: Record<string, string | number>,
        kind = SpanKind.INTERNAL,
      ): void => {
        tracer.startSpan(name, { kind, attributes }, inAgent).end();
      };
      withParent(
        'chat gpt-4o',
        {
          'gen_ai.operation.name': 'chat',
          'gen_ai.request.model': 'gpt-4o',
          'gen_ai.usage.input_tokens': 30,
          'gen_ai.usage.output_tokens': 6,
        },
        SpanKind.CLIENT,
      );
      withParent('execute_tool get_weather', {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': 'get_weather',
      });
      agent.end();
    });
    const response = await post(`${url}/v1/traces`, encode(spans, 'protobuf'), {
      'content-type': 'application/x-protobuf',
    });
    assert.equal(response.status, 200);
    assert.equal(response.type, 'application/x-protobuf');
    assert.ok(!ExportTraceServiceResponse.decode(response.body).partialSuccess, 'full success: no partialSuccess');
    const stored = await spansOf(rollout.id, 3);
    assert.deepEqual(stored.map((s) => [s.name, s.category]).sort(), [
      ['chat gpt-4o', 'llm'],
      ['execute_tool get_weather', 'tool'],
      ['invoke_agent weather', 'agent'],
    ]);
    const agentSpan = stored.find((s) => s.category === 'agent')!;
    assert.ok(
      stored
        .filter((s) => s.category !== 'agent')
        .every((s) => s.parentSpanId === agentSpan.spanId && s.traceId === agentSpan.traceId),
    );
    const detail = await client.request('getRollout', { id: rollout.id });
    assert.deepEqual(
      [detail.rollout.llmCalls, detail.rollout.promptTokens, detail.rollout.completionTokens],
      [1, 30, 6],
    );
  });

  test('gzip JSON to the shared /v1/traces (with the daemon token): spans go to the rollout named in the resource; unknown rollouts are a partial success', async () => {
    const { rollout } = await client.request('startAgentRun', {});
    const mine = oneSpan(
      'chat m',
      { 'gen_ai.operation.name': 'chat' },
      SpanKind.CLIENT,
      resourceFromAttributes({ 'lightning.rollout_id': rollout.id }),
    );
    const stray = oneSpan(
      'chat m',
      { 'gen_ai.operation.name': 'chat' },
      SpanKind.CLIENT,
      resourceFromAttributes({ 'lightning.rollout_id': 'ro-0000000000000000' }),
    );
    const orphan = oneSpan('chat m', {}, SpanKind.CLIENT);
    const body = zlib.gzipSync(encode([...mine, ...stray, ...orphan], 'json'));
    const response = await post(`${daemon.ready.url}/v1/traces`, body, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
      authorization: `Bearer ${daemon.ready.token}`,
    });
    assert.equal(response.status, 200);
    const partial = JSON.parse(response.body.toString('utf8')) as {
      partialSuccess: { rejectedSpans: string; errorMessage: string };
    };
    assert.equal(partial.partialSuccess.rejectedSpans, '2');
    assert.match(partial.partialSuccess.errorMessage, /ro-0000000000000000 does not exist/);
    assert.match(partial.partialSuccess.errorMessage, /no lightning\.rollout_id/);
    assert.equal((await spansOf(rollout.id, 1)).length, 1);
    // The same answer in protobuf, for a protobuf export.
    const binary = await post(`${daemon.ready.url}/v1/traces`, encode(stray, 'protobuf'), {
      'content-type': 'application/x-protobuf',
      authorization: `Bearer ${daemon.ready.token}`,
    });
    assert.equal(binary.type, 'application/x-protobuf');
    const decoded = ExportTraceServiceResponse.decode(binary.body).partialSuccess!;
    assert.equal(Number(decoded.rejectedSpans), 1);
    assert.match(decoded.errorMessage!, /ro-0000000000000000 does not exist/);
  });

  test('an export with a span the decoder cannot read: the others are stored, and the answer counts and names it (one part or several)', async () => {
    const span = (i: number, traceId = '4bf92f3577b34da6a3ce929d0e0e4736') => ({
      traceId,
      spanId: (0x1000 + i).toString(16).padStart(16, '0'),
      name: 'execute_tool add',
      kind: 1,
      startTimeUnixNano: '1700000000000000000',
      endTimeUnixNano: '1700000000100000000',
      attributes: [{ key: 'gen_ai.operation.name', value: { stringValue: 'execute_tool' } }],
    });
    // 3 spans are one part; 1,500 are two (otlp/parts.ts: 1,024 at most): the unreadable one is reported either way.
    for (const good of [3, 1_500]) {
      const { rollout, url } = await client.request('startAgentRun', {});
      const spans = [...Array.from({ length: good }, (_, i) => span(i)), span(good, 'not-a-trace-id')];
      const body = JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ spans }] }] });
      const response = await post(url + '/v1/traces', Buffer.from(body), { 'content-type': 'application/json' });
      assert.equal(response.status, 200);
      const partial = JSON.parse(response.body.toString('utf8')) as {
        partialSuccess: { rejectedSpans: string; errorMessage: string };
      };
      assert.equal(partial.partialSuccess.rejectedSpans, '1', `${good} good spans`);
      assert.match(partial.partialSuccess.errorMessage, new RegExp((0x1000 + good).toString(16).padStart(16, '0')));
      assert.equal((await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount, good);
    }
  });

  test('garbage protobuf, bad JSON and an unknown media type get a 4xx, store nothing, and the daemon serves on', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const garbage = await post(`${url}/v1/traces`, Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01]), {
      'content-type': 'application/x-protobuf',
    });
    assert.equal(garbage.status, 400);
    assert.match(JSON.parse(garbage.body.toString()).error.message, /protobuf/i);
    const badJson = await post(`${url}/v1/traces`, Buffer.from('{"resourceSpans": ['), {
      'content-type': 'application/json',
    });
    assert.equal(badJson.status, 400);
    const wrongType = await post(`${url}/v1/traces`, Buffer.from('hello'), { 'content-type': 'text/plain' });
    assert.equal(wrongType.status, 415);
    const badGzip = await post(`${url}/v1/traces`, Buffer.from('not gzip'), {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    });
    assert.equal(badGzip.status, 400);
    // A good export after the bad ones: once it is stored, nothing else was.
    await post(`${url}/v1/traces`, encode(oneSpan('chat m', { 'gen_ai.operation.name': 'chat' }), 'protobuf'), {
      'content-type': 'application/x-protobuf',
    });
    assert.equal((await spansOf(rollout.id, 1)).length, 1);
    assert.equal(
      (await post(`${url}/v1/metrics`, Buffer.from('x'), { 'content-type': 'application/x-protobuf' })).status,
      200,
    );
  });
});
