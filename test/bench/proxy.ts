/**
 * Capture overhead: the same scripted upstream called directly and through the daemon's recording
 * proxy, in one run. Added latency = proxied − direct at the same percentile and concurrency.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { fmt, percentile, rows, signed } from './table';

const BODY = JSON.stringify({
  model: 'test-model',
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'What is the weather in Paris?' },
  ],
});
const STREAM_BODY = JSON.stringify({
  model: 'test-model',
  stream: true,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
});
const MESSAGES_BODY = JSON.stringify({
  model: 'claude-test',
  max_tokens: 256,
  system: 'You are terse.',
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
});
const MESSAGES_STREAM_BODY = JSON.stringify({
  model: 'claude-test',
  max_tokens: 256,
  stream: true,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
});

interface Timing {
  total: number;
  firstByte: number;
}

function call(agent: http.Agent, url: string, body: string): Promise<Timing> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let firstByte = 0;
    const request = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (response) => {
        response.on('data', () => (firstByte ||= performance.now() - started));
        response.on('end', () =>
          response.statusCode === 200
            ? resolve({ total: performance.now() - started, firstByte })
            : reject(new Error(`HTTP ${response.statusCode}`)),
        );
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

async function load(
  base: string,
  path_: string,
  body: string,
  concurrency: number,
  count: number,
): Promise<{ timings: Timing[]; errors: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const timings: Timing[] = [];
  let errors = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      next += 1;
      try {
        timings.push(await call(agent, `${base}${path_}`, body));
      } catch {
        errors += 1;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  agent.destroy();
  return { timings, errors };
}

function rssMb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

/** One API called directly and through the proxy: the two bases, its path, and a non-streaming and a streaming body. */
interface Api {
  direct: string;
  proxied: string;
  path: string;
  body: string;
  streamBody: string;
}

/**
 * A row per concurrency: the p50 and p99 latency the proxy adds to non-streaming calls (the target is at 64
 * concurrent).
 */
async function addedLatencyRows(api: Api, what: string, concurrencies: number[]): Promise<void> {
  for (const concurrency of concurrencies) {
    const count = Math.max(400, concurrency * 8);
    const plain = await load(api.direct, api.path, api.body, concurrency, count);
    const through = await load(api.proxied, api.path, api.body, concurrency, count);
    const p = (t: Timing[], q: number): number =>
      percentile(
        t.map((x) => x.total),
        q,
      );
    const added50 = p(through.timings, 50) - p(plain.timings, 50);
    const added99 = p(through.timings, 99) - p(plain.timings, 99);
    rows.push({
      metric: `proxy added latency, ${what}, ${concurrency} concurrent (${count} calls)`,
      result: `p50 ${signed(added50, 2)} ms, p99 ${signed(added99, 2)} ms (p50 ${fmt(p(through.timings, 50), 2)} ms)`,
      baseline: `direct p50 ${fmt(p(plain.timings, 50), 2)} ms, p99 ${fmt(p(plain.timings, 99), 2)} ms`,
      ratio: `${fmt(p(through.timings, 50) / p(plain.timings, 50), 2)}×`,
      target: concurrency === 64 ? 'p50 ≤ 1 ms, p99 ≤ 5 ms added' : '(report)',
      met: concurrency === 64 ? (added50 <= 1 && added99 <= 5 ? 'yes' : 'NO') : '-',
    });
  }
}

/** A row per concurrency: the p50 time to first byte the proxy adds to 400 streams. */
async function addedFirstByteRows(api: Api, what: string, concurrencies: number[]): Promise<void> {
  for (const concurrency of concurrencies) {
    const plainStreams = await load(api.direct, api.path, api.streamBody, concurrency, 400);
    const proxiedStreams = await load(api.proxied, api.path, api.streamBody, concurrency, 400);
    const ttfb = (t: Timing[]): number =>
      percentile(
        t.map((x) => x.firstByte),
        50,
      );
    const addedTtfb = ttfb(proxiedStreams.timings) - ttfb(plainStreams.timings);
    rows.push({
      metric: `proxy added time to first byte, ${what}, ${concurrency} concurrent (400 streams)`,
      result: `p50 ${signed(addedTtfb, 2)} ms (p50 ${fmt(ttfb(proxiedStreams.timings), 2)} ms)`,
      baseline: `direct p50 ${fmt(ttfb(plainStreams.timings), 2)} ms`,
      ratio: `${fmt(ttfb(proxiedStreams.timings) / ttfb(plainStreams.timings), 2)}×`,
      target: 'p50 ≤ 1 ms added',
      met: addedTtfb <= 1 ? 'yes' : 'NO',
    });
  }
}

export async function proxyBenchmarks(work: string): Promise<void> {
  const upstream = await startScriptedUpstream();
  const daemon = await startDaemon(path.join(work, 'proxy', 'store.db'), ['--upstream', upstream.url], {
    LIGHTNING_LOG_LEVEL: 'warn',
  });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const { url } = await client.request('startAgentRun', {
      label: 'bench',
      providerUpstreams: { anthropic: upstream.origin },
    });
    const direct = upstream.url;
    const proxied = `${url}/v1`;
    // Warm both paths up (JIT, keep-alive sockets) before measuring.
    for (const concurrency of [1, 8]) {
      await load(direct, '/chat/completions', BODY, concurrency, 1000);
      await load(proxied, '/chat/completions', BODY, concurrency, 1000);
    }

    const chat: Api = { direct, proxied, path: '/chat/completions', body: BODY, streamBody: STREAM_BODY };
    await addedLatencyRows(chat, 'non-streaming', [1, 16, 64, 256]);
    await addedFirstByteRows(chat, 'streaming', [1, 8]);

    // The Anthropic Messages API, in the same run: its parser and record are its own.
    await load(upstream.origin, '/v1/messages', MESSAGES_BODY, 8, 1000);
    await load(url, '/v1/messages', MESSAGES_BODY, 8, 1000);
    const messages: Api = {
      direct: upstream.origin,
      proxied: url,
      path: '/v1/messages',
      body: MESSAGES_BODY,
      streamBody: MESSAGES_STREAM_BODY,
    };
    await addedLatencyRows(messages, '/v1/messages non-streaming', [1, 64]);
    await addedFirstByteRows(messages, '/v1/messages streaming', [1, 8]);

    const burstDirect = await load(direct, '/chat/completions', STREAM_BODY, 500, 500);
    // Over four rollouts: one rollout may have 128 calls in flight (a 129th is a 429 its SDK retries).
    const burstRollouts = await Promise.all(
      Array.from({ length: 4 }, (_, i) => client.request('startAgentRun', { label: `bench-burst-${i}` })),
    );
    const burstParts = await Promise.all(
      burstRollouts.map((run) => load(`${run.url}/v1`, '/chat/completions', STREAM_BODY, 125, 125)),
    );
    const burst = {
      timings: burstParts.flatMap((part) => part.timings),
      errors: burstParts.reduce((sum, part) => sum + part.errors, 0),
    };
    rows.push({
      metric: '500 concurrent streams through the proxy (4 rollouts × 125)',
      result: `${burst.timings.length} complete, ${burst.errors} errors`,
      baseline: `direct: ${burstDirect.timings.length} complete, ${burstDirect.errors} errors`,
      ratio: '-',
      target: 'no error',
      met: burst.errors === 0 && burst.timings.length === 500 ? 'yes' : 'NO',
    });

    const soakSeconds = Number(process.env.BENCH_SOAK_S ?? 60);
    const before = rssMb(daemon.process.pid!);
    const deadline = performance.now() + soakSeconds * 1000;
    let calls = 0;
    while (performance.now() < deadline) {
      const round = await load(proxied, '/chat/completions', calls % 2 ? STREAM_BODY : BODY, 32, 320);
      calls += round.timings.length;
    }
    const afterRss = rssMb(daemon.process.pid!);
    rows.push({
      metric: `daemon RSS under ${soakSeconds} s of sustained proxy load (${fmt(calls)} calls, 32 concurrent)`,
      result: `${fmt(afterRss, 1)} MB after`,
      baseline: `${fmt(before, 1)} MB before`,
      ratio: `${fmt(afterRss / before, 2)}×`,
      target: 'bounded',
      met: afterRss < before * 2 + 100 ? 'yes' : 'NO',
    });
  } finally {
    client.dispose();
    await daemon.stop();
    await upstream.close();
  }
  // The default budget, then the previous default (512 MiB) in the same run.
  await bigBodiesRss(work);
  await bigBodiesRss(work, 512);
}

/**
 * Daemon memory under 100 concurrent 30 MiB calls (an upstream that discards bodies): the
 * in-flight byte budget admits what fits and answers the rest 503 + Retry-After, so RSS stays
 * bounded (it was 7 GB). Baseline: the daemon's RSS at rest in the same run. `budgetMiB` sets
 * LIGHTNING_MAX_BUFFERED_BYTES (the default budget when absent).
 */
export async function bigBodiesRss(work: string, budgetMiB?: number): Promise<void> {
  const sink = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const body = JSON.stringify({
        id: `chatcmpl-${Math.random()}`,
        object: 'chat.completion',
        model: 'm',
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
      });
      response.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  const budget = budgetMiB === undefined ? {} : { LIGHTNING_MAX_BUFFERED_BYTES: String(budgetMiB * 1024 * 1024) };
  const daemon = await startDaemon(
    path.join(work, `proxy-big-${budgetMiB ?? 'default'}`, 'store.db'),
    ['--upstream', `http://127.0.0.1:${(sink.address() as import('node:net').AddressInfo).port}/v1`],
    { LIGHTNING_LOG_LEVEL: 'error', ...budget },
  );
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const { url } = await client.request('startAgentRun', { label: 'bench-big' });
    const rest = rssMb(daemon.process.pid!);
    const body = Buffer.from(
      JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(30 * 1024 * 1024) }] }),
    );
    let peak = rest;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(daemon.process.pid!))), 25);
    const started = performance.now();
    const statuses = await Promise.all(
      Array.from(
        { length: 100 },
        () =>
          new Promise<number>((resolve) => {
            const request = http.request(
              `${url}/v1/chat/completions`,
              { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': body.length } },
              (response) => {
                response.resume();
                response.on('end', () => resolve(response.statusCode ?? 0));
              },
            );
            request.on('error', () => resolve(-1));
            request.end(body);
          }),
      ),
    );
    clearInterval(sampler);
    const seconds = (performance.now() - started) / 1000;
    const count = (status: number): number => statuses.filter((s) => s === status).length;
    rows.push({
      metric: `daemon peak RSS, 100 concurrent 30 MiB calls (in-flight budget ${budgetMiB === undefined ? 'default' : `${budgetMiB} MiB`})`,
      result: `${fmt(peak, 0)} MB peak; ${count(200)} answered, ${count(503)} × 503 (retry), ${statuses.length - count(200) - count(503)} other, ${fmt(seconds, 1)} s`,
      baseline: `${fmt(rest, 0)} MB at rest (was 7 GB without a budget)`,
      ratio: `${fmt(peak / rest, 1)}×`,
      target: budgetMiB === undefined ? '≤ 1.5 GB' : '(compare)',
      met: budgetMiB === undefined ? (peak <= 1536 ? 'yes' : 'NO') : '-',
    });
  } finally {
    client.dispose();
    await daemon.stop();
    sink.close();
  }
}
