/**
 * OTLP ingest: protobuf trace exports posted over HTTP until their spans are committed, against
 * the transport alone (the same bodies posted to a server that only reads them) in the same run.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { SpanKind } from '@opentelemetry/api';
import { RpcClient } from '../../trainer-daemon/protocol/connection';
import { startDaemon } from '../helpers/daemon';
import { encode, recordSpans } from '../helpers/otlp';
import { fmt, rows } from './table';

const SPANS_PER_EXPORT = 512;
const EXPORTS = 120;

/** An export like an instrumented agent's: LLM calls with GenAI attributes, tool calls, agent spans. */
function exportBody(): Buffer {
  const spans = recordSpans((tracer) => {
    for (let i = 0; i < SPANS_PER_EXPORT; i += 1) {
      const kind = i % 4;
      const attributes =
        kind === 0
          ? { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'weather' }
          : kind === 3
            ? { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'get_weather', 'gen_ai.tool.call.id': `call_${i}` }
            : {
                'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-4o-mini',
                'gen_ai.response.model': 'gpt-4o-mini-2024-07-18', 'gen_ai.response.id': `chatcmpl-${i}`,
                'gen_ai.usage.input_tokens': 812, 'gen_ai.usage.output_tokens': 64, 'gen_ai.response.finish_reasons': ['stop'],
                'server.address': 'api.openai.com', 'server.port': 443,
              };
      tracer.startSpan(kind === 0 ? 'invoke_agent weather' : kind === 3 ? 'execute_tool get_weather' : 'chat gpt-4o-mini', { kind: kind === 3 ? SpanKind.INTERNAL : SpanKind.CLIENT, attributes }).end();
    }
  });
  return encode(spans, 'protobuf');
}

function postAll(url: string, bodies: Buffer[], concurrency: number): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  const started = performance.now();
  const one = (body: Buffer): Promise<void> =>
    new Promise((resolve, reject) => {
      const request = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/x-protobuf', 'content-length': body.length } }, (response) => {
        response.resume();
        response.on('end', () => (response.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${response.statusCode}`))));
      });
      request.on('error', reject);
      request.end(body);
    });
  const worker = async (): Promise<void> => {
    while (next < bodies.length) await one(bodies[next++]!);
  };
  return Promise.all(Array.from({ length: concurrency }, worker)).then(() => {
    agent.destroy();
    return performance.now() - started;
  });
}

export async function otlpBenchmark(work: string): Promise<void> {
  const body = exportBody();
  const bodies = Array.from({ length: EXPORTS }, () => body);
  const total = SPANS_PER_EXPORT * EXPORTS;

  const sink = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => response.end());
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  const sinkMs = await postAll(`http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`, bodies, 4);
  sink.close();

  const daemon = await startDaemon(path.join(work, 'otlp', 'store.db'), [], { LIGHTNING_LOG_LEVEL: 'warn' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const { rollout, url } = await client.request('startAgentRun', { label: 'otlp-bench' });
    // Each export's spans have fresh ids only once; later copies are de-duplicated — so count committed rows.
    const unique = Array.from({ length: EXPORTS }, () => exportBody());
    const ms = await postAll(`${url}/v1/traces`, unique, 4);
    const stored = (await client.request('getRollout', { id: rollout.id })).rollout.spanCount;
    const rate = stored / (ms / 1000);
    const sinkRate = total / (sinkMs / 1000);
    rows.push({
      metric: `OTLP protobuf ingest, HTTP to committed rows (${EXPORTS} exports × ${SPANS_PER_EXPORT} spans, 4 concurrent)`,
      result: `${fmt(rate)} spans/s (${fmt(stored)} stored)`,
      baseline: `${fmt(sinkRate)} spans/s (same bodies to a read-only sink)`,
      ratio: `${fmt(rate / sinkRate, 2)}×`,
      target: '≥ 30,000 spans/s',
      met: rate >= 30_000 && stored === total ? 'yes' : 'NO',
    });
  } finally {
    client.dispose();
    await daemon.stop();
  }
}
