/**
 * OTLP ingest: protobuf trace exports posted over HTTP until their spans are committed, against
 * the transport alone (the same bodies posted to a server that only reads them) in the same run;
 * and with the caps and fairness of issue 20 (D8): one large export's rate and how long a small
 * export of another rollout takes while it is ingested, against that small export alone.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { SpanKind } from '@opentelemetry/api';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { parsed } from '../helpers/params';
import { rolloutKey } from '../helpers/store';
import { startDaemon } from '../helpers/daemon';
import { BIG_EXPORT_SPANS, bigGzipExport, encode, recordSpans } from '../helpers/otlp';
import { healthProbe } from '../helpers/http';
import fs from 'node:fs';
import { fmt, median, percentile, processCpuMs, rows } from './table';

const SPANS_PER_EXPORT = 512;
const EXPORTS = 120;
/** Daemon ingests, each followed by its bare loops. */
const INGEST_PAIRS = 3;
/** The small-exports row: rollouts exporting at once, exports each, spans per export. */
const SMALL_ROLLOUTS = 16;
const SMALL_EXPORTS = 100;
const SMALL_SPANS = 16;

/** Numbers the exports: each call's response id is its own, as a provider's are. */
let exportsMade = 0;

/**
 * An export like an instrumented agent's: LLM calls with GenAI attributes, tool calls, agent spans. Every call has
 * its own response id: repeated ids would make the daemon look each call up against all earlier calls of that id.
 */
function exportBody(count = SPANS_PER_EXPORT): Buffer {
  exportsMade += 1;
  const spans = recordSpans((tracer) => {
    for (let i = 0; i < count; i += 1) {
      const kind = i % 4;
      const attributes =
        kind === 0
          ? { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'weather' }
          : kind === 3
            ? {
                'gen_ai.operation.name': 'execute_tool',
                'gen_ai.tool.name': 'get_weather',
                'gen_ai.tool.call.id': `call_${i}`,
              }
            : {
                'gen_ai.operation.name': 'chat',
                'gen_ai.provider.name': 'openai',
                'gen_ai.request.model': 'gpt-4o-mini',
                'gen_ai.response.model': 'gpt-4o-mini-2024-07-18',
                'gen_ai.response.id': `chatcmpl-${exportsMade}-${i}`,
                'gen_ai.usage.input_tokens': 812,
                'gen_ai.usage.output_tokens': 64,
                'gen_ai.response.finish_reasons': ['stop'],
                'server.address': 'api.openai.com',
                'server.port': 443,
              };
      tracer
        .startSpan(kind === 0 ? 'invoke_agent weather' : kind === 3 ? 'execute_tool get_weather' : 'chat gpt-4o-mini', {
          kind: kind === 3 ? SpanKind.INTERNAL : SpanKind.CLIENT,
          attributes,
        })
        .end();
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
      const request = http.request(
        url,
        { method: 'POST', agent, headers: { 'content-type': 'application/x-protobuf', 'content-length': body.length } },
        (response) => {
          response.resume();
          response.on('end', () =>
            response.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${response.statusCode}`)),
          );
        },
      );
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

/** `fn` given the URL of a server that only reads what it is sent (the transport alone), closed after. */
async function withSink<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const sink = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => response.end());
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  try {
    return await fn(`http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`);
  } finally {
    sink.close();
  }
}

/**
 * Several agents exporting at once, each its exports one after another on its own connection (a
 * BatchSpanProcessor's way): the wall time, and each export's time to its answer.
 */
async function postStreams(
  streams: ReadonlyArray<{ url: string; bodies: Buffer[] }>,
): Promise<{ ms: number; latencies: number[] }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: streams.length });
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    streams.map(async ({ url, bodies }) => {
      for (const body of bodies)
        latencies.push(await postOnce(url, body, { 'content-type': 'application/x-protobuf' }, agent));
    }),
  );
  agent.destroy();
  return { ms: performance.now() - started, latencies };
}

/** Small exports of many rollouts at once (agents in a dataset run): exports/s, against the same bodies to the sink. */
async function smallExportsRow(client: RpcClient): Promise<void> {
  const streams: Array<{ id: string; url: string; bodies: Buffer[] }> = [];
  for (let r = 0; r < SMALL_ROLLOUTS; r += 1) {
    const { rollout, url } = await client.request('startAgentRun', { label: `otlp-small-${r}` });
    streams.push({
      id: rollout.id,
      url: `${url}/v1/traces`,
      bodies: Array.from({ length: SMALL_EXPORTS }, () => exportBody(SMALL_SPANS)),
    });
  }
  const sink = await withSink((url) => postStreams(streams.map(({ bodies }) => ({ url, bodies }))));
  const daemon = await postStreams(streams);
  let stored = 0;
  for (const { id } of streams) stored += (await client.request('getRollout', { id, spans: false })).rollout.spanCount;
  const count = SMALL_ROLLOUTS * SMALL_EXPORTS;
  const rate = count / (daemon.ms / 1000);
  const sinkRate = count / (sink.ms / 1000);
  rows.push({
    metric: `OTLP small exports: ${SMALL_ROLLOUTS} rollouts at once, each ${SMALL_EXPORTS} protobuf exports of ${SMALL_SPANS} spans one after another`,
    result: `${fmt(rate)} exports/s (${fmt((stored / daemon.ms) * 1000)} spans/s stored, ${fmt(stored)} of ${fmt(count * SMALL_SPANS)}; p50 ${fmt(median(daemon.latencies), 1)} ms)`,
    baseline: `${fmt(sinkRate)} exports/s (same bodies to a read-only sink)`,
    ratio: `${fmt(rate / sinkRate, 2)}×`,
    target: '(report)',
    met: '-',
  });
}

export async function otlpBenchmark(work: string): Promise<void> {
  const body = exportBody();
  const bodies = Array.from({ length: EXPORTS }, () => body);
  const total = SPANS_PER_EXPORT * EXPORTS;

  const sinkMs = await withSink((sinkUrl) => postAll(sinkUrl, bodies, 4));

  const storeFile = path.join(work, 'otlp', 'store.db');
  const daemon = await startDaemon(storeFile, [], { LIGHTNING_LOG_LEVEL: 'warn' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    // INGEST_PAIRS pairs measured back to back, the machine's load alike for each side of a pair: the daemon's ingest
    // of fresh exports into a rollout of its own, then the bare loops over that rollout's rows. Medians of each and
    // of the pairs' ratios.
    const pairs: Array<{
      rate: number;
      stored: number;
      bare: number;
      perExport: number;
      cpu?: { user: number; system: number };
    }> = [];
    for (let i = 1; i <= INGEST_PAIRS; i += 1) {
      const { rollout, url } = await client.request('startAgentRun', { label: `otlp-bench-${i}` });
      // Each export's spans have fresh ids only once; later copies are de-duplicated — so count committed rows.
      const unique = Array.from({ length: EXPORTS }, () => exportBody());
      const cpuBefore = processCpuMs(daemon.process.pid);
      const ms = await postAll(`${url}/v1/traces`, unique, 4);
      const cpuAfter = processCpuMs(daemon.process.pid);
      const stored = (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount;
      pairs.push({
        rate: stored / (ms / 1000),
        stored,
        bare: bareInsertRate(storeFile, rollout.id, path.join(work, `otlp-bare-${i}.db`)),
        perExport: bareInsertRate(storeFile, rollout.id, path.join(work, `otlp-bare-part-${i}.db`), SPANS_PER_EXPORT),
        cpu:
          cpuBefore && cpuAfter
            ? { user: cpuAfter.user - cpuBefore.user, system: cpuAfter.system - cpuBefore.system }
            : undefined,
      });
    }
    const rate = median(pairs.map((p) => p.rate));
    const stored = Math.min(...pairs.map((p) => p.stored));
    const bareRate = median(pairs.map((p) => p.bare));
    const perExportRate = median(pairs.map((p) => p.perExport));
    const ratio = median(pairs.map((p) => p.rate / p.bare));
    const sinkRate = total / (sinkMs / 1000);
    const rates = pairs.map((p) => fmt(p.rate)).join(' / ');
    rows.push({
      metric: `OTLP protobuf ingest vs a bare INSERT loop of the same rows (${fmt(stored)} spans, one transaction, same schema; median of ${INGEST_PAIRS} pairs)`,
      result: `${fmt(rate)} spans/s (${rates})`,
      baseline: `${fmt(bareRate)} rows/s (bare INSERT loop)`,
      ratio: `${fmt(ratio, 2)}×`,
      target: '≥ 0.5×',
      met: ratio >= 0.5 ? 'yes' : 'NO',
    });
    rows.push({
      metric: `OTLP protobuf ingest vs the bare INSERT loop committing once per ${SPANS_PER_EXPORT} rows (each export's commit before its answer)`,
      result: `${fmt(rate)} spans/s`,
      baseline: `${fmt(perExportRate)} rows/s (bare loop, ${fmt(stored / SPANS_PER_EXPORT)} commits)`,
      ratio: `${fmt(median(pairs.map((p) => p.rate / p.perExport)), 2)}×`,
      target: '(report)',
      met: '-',
    });
    const cpus = pairs.flatMap((p) => (p.cpu ? [p.cpu] : []));
    if (cpus.length > 0) {
      const userUs = (median(cpus.map((c) => c.user)) * 1000) / stored;
      const systemUs = (median(cpus.map((c) => c.system)) * 1000) / stored;
      const daemonUs = userUs + systemUs;
      rows.push({
        metric: 'OTLP protobuf ingest: the daemon’s CPU per span, all its threads (user + system; medians)',
        result: `${fmt(daemonUs, 1)} µs/span (user ${fmt(userUs, 1)}, system ${fmt(systemUs, 1)})`,
        baseline: `${fmt(1e6 / bareRate, 1)} µs/row (bare INSERT loop, one thread)`,
        ratio: `${fmt(daemonUs / (1e6 / bareRate), 1)}×`,
        target: `(report: ${os.availableParallelism()} CPUs here)`,
        met: '-',
      });
    }
    rows.push({
      metric: `OTLP protobuf ingest, HTTP to committed rows (${EXPORTS} exports × ${SPANS_PER_EXPORT} spans, 4 concurrent)`,
      result: `${fmt(rate)} spans/s (${fmt(stored)} stored)`,
      baseline: `${fmt(sinkRate)} spans/s (same bodies to a read-only sink)`,
      ratio: `${fmt(rate / sinkRate, 2)}×`,
      target: '≥ 30,000 spans/s',
      met: rate >= 30_000 && stored === total ? 'yes' : 'NO',
    });
    await smallExportsRow(client);
  } finally {
    client.dispose();
    await daemon.stop();
  }
}

/**
 * The rows the daemon stored, inserted again into a fresh store of the same schema — in one transaction, or
 * committing every `perCommit` rows: rows/s.
 */
function bareInsertRate(from: string, rolloutId: string, to: string, perCommit = Infinity): number {
  const source = Store.open(from);
  const spans = source.db
    .prepare('SELECT * FROM spans WHERE rollout = ? ORDER BY sequence')
    .all(rolloutKey(source, rolloutId)) as Array<Record<string, unknown>>;
  source.close();
  const target = Store.open(to);
  try {
    const into = rolloutKey(target, target.createRollout(parsed('createRollout', {})).id);
    const columns = [
      'attempt',
      'sequence',
      'trace_id',
      'span_id',
      'parent_span_id',
      'name',
      'kind',
      'category',
      'start_ms',
      'end_ms',
      'status_code',
      'status_message',
      'attributes',
      'events',
      'prompt_tokens',
      'completion_tokens',
      'response_id',
    ];
    const insert = target.db.prepare(
      `INSERT INTO spans (rollout, ${columns.join(', ')}) VALUES (?, ${columns.map(() => '?').join(', ')})`,
    );
    const started = performance.now();
    const commit = target.db.transaction((part: Array<Record<string, unknown>>) => {
      for (const span of part) insert.run(into, ...columns.map((column) => span[column]));
    });
    const size = Math.min(perCommit, spans.length);
    for (let first = 0; first < spans.length; first += size) commit(spans.slice(first, first + size));
    return spans.length / ((performance.now() - started) / 1000);
  } finally {
    target.close();
  }
}

const HEAVY_SPANS = 60_000;

/** An OTLP/JSON export of LLM spans with a 600-character prompt each (~40 MiB decompressed, under 1 MiB gzip). */
function heavyBody(count: number, first: number): Buffer {
  const prompt = 'p'.repeat(600);
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
  return zlib.gzipSync(JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ spans }] }] }));
}

function postOnce(url: string, body: Buffer, headers: Record<string, string>, agent?: http.Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const request = http.request(
      url,
      { method: 'POST', agent, headers: { ...headers, 'content-length': String(body.length) } },
      (response) => {
        response.resume();
        response.on('end', () =>
          response.statusCode === 200
            ? resolve(performance.now() - started)
            : reject(new Error(`HTTP ${response.statusCode}`)),
        );
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/**
 * A large export's ingest rate, and a small export of another rollout while it runs against that small export alone.
 */
export async function otlpFairnessBenchmark(work: string): Promise<void> {
  const daemon = await startDaemon(path.join(work, 'otlp-heavy', 'store.db'), [], { LIGHTNING_LOG_LEVEL: 'warn' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const heavy = await client.request('startAgentRun', { label: 'heavy' });
    const small = await client.request('startAgentRun', { label: 'small' });
    const smallBody = encode(
      recordSpans((tracer) => tracer.startSpan('chat m', { attributes: { 'gen_ai.operation.name': 'chat' } }).end()),
      'protobuf',
    );
    const smallHeaders = { 'content-type': 'application/x-protobuf' };
    const alone: number[] = [];
    // The same body each time, alone and during: after the first, its span is a duplicate (decoded, not stored again).
    for (let i = 0; i < 50; i += 1) alone.push(await postOnce(`${small.url}/v1/traces`, smallBody, smallHeaders));

    const body = heavyBody(HEAVY_SPANS, 1);
    const started = performance.now();
    let heavyMs = 0;
    const heavyDone = postOnce(`${heavy.url}/v1/traces`, body, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    }).then((ms) => (heavyMs = ms));
    const during: number[] = [];
    while (heavyMs === 0)
      during.push(await postOnce(`${small.url}/v1/traces`, smallBody, smallHeaders).catch(() => Number.NaN));
    await heavyDone;
    const stored = (await client.request('getRollout', { id: heavy.rollout.id, spans: false })).rollout.spanCount;
    const rate = stored / ((performance.now() - started) / 1000);
    rows.push({
      metric: `OTLP one large export (${fmt(HEAVY_SPANS)} spans, ${fmt(body.length / 1024)} KiB gzip JSON), committed in parts`,
      result: `${fmt(rate)} spans/s (${fmt(stored)} stored, ${fmt(heavyMs / 1000, 1)} s)`,
      baseline: '-',
      ratio: '-',
      target: '(report)',
      met: stored === HEAVY_SPANS ? '-' : 'NO',
    });
    const answered = during.filter((ms) => Number.isFinite(ms));
    rows.push({
      metric: `OTLP small export of another rollout during that large one (${answered.length} exports)`,
      result: `p50 ${fmt(median(answered), 1)} ms, max ${fmt(Math.max(...answered), 0)} ms${answered.length < during.length ? `, ${during.length - answered.length} failed` : ''}`,
      baseline: `alone: p50 ${fmt(median(alone), 1)} ms, p99 ${fmt(percentile(alone, 99), 1)} ms`,
      ratio: `${fmt(median(answered) / median(alone), 1)}×`,
      target: 'answered throughout (not after the large one)',
      met: answered.length > 1 && answered.length === during.length ? 'yes' : 'NO',
    });
  } finally {
    client.dispose();
    await daemon.stop();
  }
}

/** A process's resident memory now and at its peak (VmRSS, VmHWM), in bytes (Linux). */
function residentBytes(pid: number): { now: number; peak: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string): number =>
    Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN) * 1024;
  return { now: kib('VmRSS'), peak: kib('VmHWM') };
}

/**
 * The daemon's memory for one export near the body cap (~121 MB once inflated, gzip on the wire): its peak resident
 * memory against its resident memory just before, with the decode workers' heap bound (LIGHTNING_OTLP_WORKER_HEAP_MB,
 * 1 GiB each) and /health's slowest answer meanwhile.
 */
export async function otlpMemoryBenchmark(work: string): Promise<void> {
  const { gzip, inflated } = await bigGzipExport();
  const daemon = await startDaemon(path.join(work, 'otlp-memory', 'store.db'), [], { LIGHTNING_LOG_LEVEL: 'warn' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const { rollout, url } = await client.request('startAgentRun', { label: 'otlp-memory' });
    const before = residentBytes(daemon.process.pid!).now;
    const probe = healthProbe(daemon.ready.url, 10_000);
    const ms = await postOnce(`${url}/v1/traces`, gzip, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    });
    const worstHealth = await probe.stop();
    const peak = residentBytes(daemon.process.pid!).peak;
    const stored = (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.spanCount;
    const MiB = 1024 * 1024;
    rows.push({
      metric: `OTLP memory: one export of ${fmt(inflated / 1e6)} MB once inflated (${fmt(gzip.length / 1024)} KiB gzip, ${fmt(BIG_EXPORT_SPANS)} spans), decode workers capped at 1 GiB heap each`,
      result: `peak RSS ${fmt(peak / MiB)} MiB (${fmt((peak - before) / MiB)} MiB over idle); stored ${fmt(stored)} in ${fmt(ms / 1000, 1)} s; /health worst ${fmt(worstHealth)} ms`,
      baseline: `${fmt(before / MiB)} MiB RSS idle`,
      ratio: `${fmt((peak - before) / inflated, 1)}× the export`,
      target: '/health < 1 s; stored whole',
      met: worstHealth < 1_000 && stored === BIG_EXPORT_SPANS ? 'yes' : 'NO',
    });
  } finally {
    client.dispose();
    await daemon.stop();
  }
}
