/**
 * The daemon's recording proxy next to a mainstream open-source Node LLM gateway (Portkey's, @portkey-ai/gateway,
 * pinned and installed into .cache/ by test/provision/), in one run, over the same scripted upstream: the latency
 * each adds to a direct call at 1, 16 and 64 concurrent callers (interleaved rounds, pooled percentiles), and each
 * one's CPU per call (its process's user + system time over the calls). Then a soak: 20,000 calls at 64 concurrent
 * through the proxy, every answer's status counted, next to the same calls made directly.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { fmt, percentile, processCpuMs, rows, signed } from './table';

const BODY = JSON.stringify({
  model: 'test-model',
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'What is the weather in Paris?' },
  ],
});
const CONCURRENCY = [1, 16, 64] as const;
const ROUNDS = 3;
export const SOAK_CALLS = Number(process.env.BENCH_PROXY_SOAK_CALLS ?? 20_000);

interface Target {
  readonly url: string;
  readonly headers: Record<string, string>;
}

interface LoadResult {
  /** Milliseconds of each call answered 200. */
  readonly latencies: number[];
  /** How many calls got each status (-1: a connection error). */
  readonly statuses: Map<number, number>;
}

/** `count` calls of BODY to `target` by `concurrency` callers, each on its kept-alive connection. */
async function load(target: Target, concurrency: number, count: number): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  const note = (status: number): void => void statuses.set(status, (statuses.get(status) ?? 0) + 1);
  const headers = {
    ...target.headers,
    'content-type': 'application/json',
    'content-length': `${Buffer.byteLength(BODY)}`,
  };
  const one = (): Promise<void> =>
    new Promise((resolve) => {
      const started = performance.now();
      const request = http.request(target.url, { method: 'POST', agent, headers }, (response) => {
        response.resume();
        response.on('end', () => {
          note(response.statusCode ?? 0);
          if (response.statusCode === 200) latencies.push(performance.now() - started);
          resolve();
        });
        response.on('error', () => (note(-1), resolve()));
      });
      request.on('error', () => (note(-1), resolve()));
      request.end(BODY);
    });
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next += 1;
        await one();
      }
    }),
  );
  agent.destroy();
  return { latencies, statuses };
}

/** A process's CPU time so far (user + system), in ms; this bench runs where /proc is. */
function cpuMs(pid: number): number {
  const cpu = processCpuMs(pid);
  if (!cpu) throw new Error(`no CPU time for process ${pid}: the gateway bench reads /proc (Linux)`);
  return cpu.user + cpu.system;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Portkey's gateway on a free port (headless), once it answers. */
async function startPortkey(script: string): Promise<{ url: string; process: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, [script, `--port=${port}`, '--headless'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, NODE_ENV: 'production' },
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`the Portkey gateway exited (${child.exitCode}): ${stderr.slice(-500)}`);
    const up = await fetch(url).then(
      () => true,
      () => false,
    );
    if (up) return { url, process: child };
    if (Date.now() > deadline)
      throw new Error(`the Portkey gateway did not answer on ${url} in 30 s: ${stderr.slice(-500)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const p = (values: number[], q: number): number => percentile(values, q);
const statusList = (statuses: Map<number, number>): string =>
  [...statuses]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${fmt(n)} × ${status === -1 ? 'connection error' : status}`)
    .join(', ');
const non200 = (statuses: Map<number, number>): number =>
  [...statuses].reduce((sum, [status, n]) => sum + (status === 200 ? 0 : n), 0);

export async function gatewayBenchmark(work: string, portkeyScript: string): Promise<void> {
  const upstream = await startScriptedUpstream();
  const daemon = await startDaemon(path.join(work, 'gateway', 'store.db'), ['--upstream', upstream.url], {
    LIGHTNING_LOG_LEVEL: 'warn',
  });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  const portkey = await startPortkey(portkeyScript);
  try {
    const { rollout, url } = await client.request('startAgentRun', { label: 'bench-gateway' });
    const targets = {
      direct: { url: `${upstream.url}/chat/completions`, headers: {} },
      daemon: { url: `${url}/v1/chat/completions`, headers: {} },
      portkey: {
        url: `${portkey.url}/v1/chat/completions`,
        headers: {
          'x-portkey-provider': 'openai',
          'x-portkey-custom-host': upstream.url,
          authorization: 'Bearer sk-bench',
        },
      },
    } satisfies Record<string, Target>;
    // Each path answers, and is warm (JIT, kept-alive sockets), before anything is measured.
    for (const [name, target] of Object.entries(targets)) {
      const warm = await load(target, 8, 500);
      if (non200(warm.statuses) > 0) throw new Error(`${name} did not answer 200: ${statusList(warm.statuses)}`);
    }
    const pids = { daemon: daemon.process.pid!, portkey: portkey.process.pid! };
    for (const concurrency of CONCURRENCY) {
      const count = concurrency === 1 ? 300 : concurrency * 25;
      const latencies = { direct: [] as number[], daemon: [] as number[], portkey: [] as number[] };
      const cpu = { daemon: 0, portkey: 0 };
      for (let round = 0; round < ROUNDS; round += 1) {
        for (const name of ['direct', 'daemon', 'portkey'] as const) {
          const before = name === 'direct' ? 0 : cpuMs(pids[name]);
          const result = await load(targets[name], concurrency, count);
          if (name !== 'direct') cpu[name] += cpuMs(pids[name]) - before;
          latencies[name].push(...result.latencies);
        }
      }
      const added = (name: 'daemon' | 'portkey', q: number): number => p(latencies[name], q) - p(latencies.direct, q);
      const ratio = added('daemon', 50) / added('portkey', 50);
      rows.push({
        metric: `proxy vs Portkey gateway: latency added to a direct call, ${concurrency} concurrent (${fmt(count * ROUNDS)} calls each)`,
        result: `p50 ${signed(added('daemon', 50), 2)} ms, p99 ${signed(added('daemon', 99), 2)} ms`,
        baseline: `Portkey 1.15.2: p50 ${signed(added('portkey', 50), 2)} ms, p99 ${signed(added('portkey', 99), 2)} ms (direct p50 ${fmt(p(latencies.direct, 50), 2)} ms)`,
        ratio: `${fmt(ratio, 2)}× Portkey's (p50)`,
        target: "≤ 1.25× Portkey's",
        met: ratio <= 1.25 ? 'yes' : 'NO',
      });
      const calls = count * ROUNDS;
      rows.push({
        metric: `proxy CPU per call, ${concurrency} concurrent (process user + system over ${fmt(calls)} calls; the daemon records each)`,
        result: `${fmt(cpu.daemon / calls, 3)} ms`,
        baseline: `Portkey 1.15.2: ${fmt(cpu.portkey / calls, 3)} ms (records nothing)`,
        ratio: `${fmt(cpu.daemon / cpu.portkey, 2)}×`,
        target: 'reported',
        met: '—',
      });
    }

    const direct = await load(targets.direct, 64, SOAK_CALLS);
    const before = cpuMs(pids.daemon);
    const started = performance.now();
    const through = await load(targets.daemon, 64, SOAK_CALLS);
    const seconds = (performance.now() - started) / 1000;
    const cpuPerCall = (cpuMs(pids.daemon) - before) / SOAK_CALLS;
    const stored = (await client.request('getRollout', { id: rollout.id, spans: false })).rollout.llmCalls;
    rows.push({
      metric: `proxy soak: ${fmt(SOAK_CALLS)} calls at 64 concurrent callers, kept-alive (then ${fmt(stored)} calls recorded in the rollout)`,
      result: `${statusList(through.statuses)} in ${fmt(seconds, 1)} s; daemon CPU ${fmt(cpuPerCall, 3)} ms a call`,
      baseline: `direct: ${statusList(direct.statuses)}`,
      ratio: '—',
      target: '0 non-200 where the direct path has none',
      met: non200(through.statuses) === 0 && through.latencies.length === SOAK_CALLS ? 'yes' : 'NO',
    });
  } finally {
    portkey.process.kill('SIGTERM');
    client.dispose();
    await daemon.stop();
    await upstream.close();
  }
}
