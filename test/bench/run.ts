/**
 * `npm run bench`: the foundation's speed targets, each measured next to a baseline in the same run
 * and printed as a table. Targets are reported, never asserted (machines are noisy).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { silentLogger } from '../../trainer-daemon/log';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { Store } from '../../trainer-daemon/store/store';
import { CLI, startDaemon } from '../helpers/daemon';
import { seedRollouts } from '../helpers/largeStore';
import { llmSpan } from '../helpers/spans';
import { rolloutKey } from '../helpers/store';
import { fmt, machineLine, median, printTable, rows, sections, writeBenchmarksDoc } from './table';
import { lightningRlBenchmark } from './lightningrl';
import { otlpBenchmark, otlpFairnessBenchmark, otlpMemoryBenchmark } from './otlp';
import { pageSizeBenchmark } from './pageSize';
import { proxyBenchmarks } from './proxy';
import { gatewayBenchmark } from './gateway';
import { runnerBenchmark } from './runner';
import { rewardsBenchmark } from './rewards';
import { trainerBenchmark } from './trainer';
import { bundleBenchmark } from './bundle';
import { editorBenchmark } from './editor';
import { packagingBenchmark } from './packaging';
import { scaleBenchmark } from './scale';
import { checkpointsBenchmark } from './checkpoints';
import { policiesBenchmark } from './policies';
import { parsed } from '../helpers/params';
import { ensureApt, ensureNode, ensurePortkeyGateway, ensurePythonVenv, ProvisionError } from '../provision/index.mjs';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-bench-'));

function freshStore(name: string): Store {
  return Store.open(path.join(work, `${name}.db`));
}

/**
 * Batched ingest through the WriteQueue (group commit, what the RPC, proxy and OTLP receiver use) vs a bare INSERT
 * loop.
 */
async function spanIngest(): Promise<void> {
  const rollouts = 100;
  const writesPerRollout = 100;
  const spansPerWrite = 10;
  const total = rollouts * writesPerRollout * spansPerWrite;
  const samples = Array.from({ length: total }, () => llmSpan());

  const baseline = freshStore('ingest-baseline');
  const baseRollout = rolloutKey(baseline, baseline.createRollout(parsed('createRollout', {})).id);
  const insert = baseline.db
    .prepare(`INSERT INTO spans (rollout, attempt, sequence, trace_id, span_id, parent_span_id, name, kind,
    category, start_ms, end_ms, status_code, status_message, attributes, events, prompt_tokens, completion_tokens)
    VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  let started = performance.now();
  baseline.db.transaction(() => {
    samples.forEach((s, i) =>
      insert.run(
        baseRollout,
        i + 1,
        s.traceId,
        s.spanId,
        s.parentSpanId,
        s.name,
        s.kind,
        s.category,
        s.startMs,
        s.endMs,
        s.statusCode,
        s.statusMessage,
        JSON.stringify(s.attributes),
        JSON.stringify(s.events),
        s.promptTokens,
        s.completionTokens,
      ),
    );
  })();
  const baselineRate = total / ((performance.now() - started) / 1000);
  baseline.close();

  const store = freshStore('ingest');
  const writes = new WriteQueue(store, silentLogger);
  const ids = Array.from({ length: rollouts }, () => store.createRollout(parsed('createRollout', {})).id);
  started = performance.now();
  const pending: Array<Promise<unknown>> = [];
  for (let w = 0; w < writesPerRollout; w += 1) {
    for (let r = 0; r < rollouts; r += 1) {
      const offset = (w * rollouts + r) * spansPerWrite;
      const spans = samples.slice(offset, offset + spansPerWrite);
      pending.push(writes.submitSpans(ids[r]!, spans));
    }
    // Let the event loop turn as it does when writes arrive from sockets.
    if (w % 10 === 9) await new Promise((resolve) => setImmediate(resolve));
  }
  await Promise.all(pending);
  const rate = total / ((performance.now() - started) / 1000);
  store.close();
  rows.push({
    metric: `span ingest, batched (${fmt(total)} spans, ${fmt(total / spansPerWrite)} writes)`,
    result: `${fmt(rate)} spans/s`,
    baseline: `${fmt(baselineRate)} spans/s (bare INSERT loop, one txn)`,
    ratio: `${fmt(rate / baselineRate, 2)}×`,
    target: '≥ 50,000 spans/s',
    met: rate >= 50_000 ? 'yes' : 'NO',
  });
}

/**
 * create → running → 10 spans → reward → succeeded, through the store API: one rollout after
 * another (each step its own transaction), and 32 rollouts in flight through the WriteQueue, as the
 * daemon sees them from concurrent runners (steps of different rollouts share group commits).
 */
async function lifecycle(): Promise<void> {
  const count = 3_000;
  const spans = Array.from({ length: count }, () => Array.from({ length: 10 }, () => llmSpan()));

  const baseline = freshStore('lifecycle-baseline');
  const db = baseline.db;
  const ins = db.prepare(
    `INSERT INTO rollouts (id, status, mode, source, created_at, updated_at) VALUES (?, 'queued', 'debug', '{"kind":"api"}', ?, ?)`,
  );
  const run = db.prepare(`UPDATE rollouts SET status = 'running', attempt_count = 1 WHERE id = ?`);
  const span =
    db.prepare(`INSERT INTO spans (rollout, attempt, sequence, trace_id, span_id, name, kind, category, start_ms, status_code, attributes, events)
    VALUES (?, 1, ?, ?, ?, ?, 'client', 'llm', ?, 'ok', ?, '[]')`);
  const rew = db.prepare(
    `INSERT INTO rewards (rollout_id, name, value, source, created_at) VALUES (?, 'reward', 1, 'agent', ?)`,
  );
  const fin = db.prepare(`UPDATE rollouts SET status = 'succeeded' WHERE id = ?`);
  let started = performance.now();
  for (let i = 0; i < count; i += 1) {
    const id = `ro-b${i}`;
    const now = Date.now();
    const key = db.transaction(() => ins.run(id, now, now).lastInsertRowid)();
    db.transaction(() => run.run(id))();
    db.transaction(() =>
      spans[i]!.forEach((s, k) =>
        span.run(key, k + 1, s.traceId, s.spanId, s.name, s.startMs, JSON.stringify(s.attributes)),
      ),
    )();
    db.transaction(() => rew.run(id, now))();
    db.transaction(() => fin.run(id))();
  }
  const baselineRate = count / ((performance.now() - started) / 1000);
  baseline.close();

  const store = freshStore('lifecycle');
  started = performance.now();
  for (let i = 0; i < count; i += 1) {
    const { id } = store.createRollout(parsed('createRollout', { label: 'bench' }));
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    store.addSpans({ rolloutId: id, spans: spans[i]! });
    store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' }));
    store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }));
  }
  const rate = count / ((performance.now() - started) / 1000);
  store.close();
  rows.push({
    metric: `rollout lifecycle via store API, sequential (${fmt(count)} × create, run, 10 spans, reward, finish)`,
    result: `${fmt(rate)} rollouts/s`,
    baseline: `${fmt(baselineRate)} rollouts/s (same 5 transactions, bare SQL)`,
    ratio: `${fmt(rate / baselineRate, 2)}×`,
    target: '≥ 2,000 rollouts/s',
    met: rate >= 2_000 ? 'yes' : 'NO',
  });

  const grouped = freshStore('lifecycle-grouped');
  const writes = new WriteQueue(grouped, silentLogger);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      const { id } = await writes.submit(() => grouped.createRollout(parsed('createRollout', { label: 'bench' })));
      await writes.submit(() => grouped.transitionRollout(parsed('transitionRollout', { id, to: 'running' })));
      await writes.submitSpans(id, spans[i]!);
      await writes.submit(() => grouped.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' })));
      await writes.submit(() => grouped.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' })));
    }
  };
  started = performance.now();
  await Promise.all(Array.from({ length: 32 }, worker));
  const groupedRate = count / ((performance.now() - started) / 1000);
  grouped.close();
  rows.push({
    metric: `rollout lifecycle via WriteQueue, 32 rollouts in flight (${fmt(count)} rollouts)`,
    result: `${fmt(groupedRate)} rollouts/s`,
    baseline: `${fmt(baselineRate)} rollouts/s (same 5 transactions, bare SQL)`,
    ratio: `${fmt(groupedRate / baselineRate, 2)}×`,
    target: '≥ 2,000 rollouts/s',
    met: groupedRate >= 2_000 ? 'yes' : 'NO',
  });
}

async function listOverRpc(file: string): Promise<void> {
  const daemon = await startDaemon(file);
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const time = async (fn: () => Promise<unknown>, n: number): Promise<number> => {
      for (let i = 0; i < 5; i += 1) await fn();
      const samples: number[] = [];
      for (let i = 0; i < n; i += 1) {
        const t0 = performance.now();
        await fn();
        samples.push(performance.now() - t0);
      }
      return median(samples);
    };
    const roundTrip = await time(() => client.request('daemonInfo', {}), 200);
    const queries: Array<[string, Parameters<RpcClient['request']>[1]]> = [
      ['status=failed', { status: ['failed'], limit: 50 }],
      ['mode=val, page 3 (cursor)', { mode: 'val', limit: 50 }],
      ['text search "agent-3"', { search: 'agent-3', limit: 50 }],
      ['status+mode+label', { status: ['succeeded'], mode: 'train', label: 'agent-2', limit: 50 }],
    ];
    for (const [name, params] of queries) {
      let call: () => Promise<unknown> = () => client.request('listRollouts', params as never);
      if (name.includes('cursor')) {
        const first = await client.request('listRollouts', params as never);
        const second = await client.request('listRollouts', { ...(params as object), cursor: first.nextCursor! });
        call = () => client.request('listRollouts', { ...(params as object), cursor: second.nextCursor! });
      }
      const ms = await time(call, 100);
      rows.push({
        metric: `rollouts/list page of 50, ${name}, 100k rollouts, over RPC (median)`,
        result: `${fmt(ms, 2)} ms`,
        baseline: `${fmt(roundTrip, 2)} ms (daemon/info round trip)`,
        ratio: `${fmt(ms / roundTrip, 1)}×`,
        target: '≤ 10 ms',
        met: ms <= 10 ? 'yes' : 'NO',
      });
    }
  } finally {
    client.dispose();
    await daemon.stop();
  }
}

function timeToFirstLine(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    readline.createInterface({ input: child.stdout }).once('line', () => {
      const elapsed = performance.now() - started;
      child.kill('SIGTERM');
      child.once('exit', () => resolve(elapsed));
    });
    child.once('error', reject);
  });
}

async function readyTime(file: string): Promise<void> {
  const runs = 7;
  const node: number[] = [];
  const daemon: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    node.push(await timeToFirstLine(['-e', 'console.log("up")']));
    daemon.push(await timeToFirstLine([CLI, 'serve', '--store', file]));
  }
  const ms = median(daemon);
  const base = median(node);
  rows.push({
    metric: `daemon ready line after spawn, existing 100k store (median of ${runs})`,
    result: `${fmt(ms)} ms`,
    baseline: `${fmt(base)} ms (bare node printing a line)`,
    ratio: `${fmt(ms / base, 1)}×`,
    target: '≤ 300 ms',
    met: ms <= 300 ? 'yes' : 'NO',
  });
}

/**
 * What the rows need, provisioned the way `npm test` does it (test/provision/, saying what and why): Debian's PyTorch
 * for the trainer rows, the test venv (torch 2, transformers + peft, Ray) for the HF, FSDP and Ray rows, Node 24 for
 * the node:sqlite row. A part that cannot be provisioned here is said once; the rows that need it then print why.
 */
let portkeyScript: string | undefined;

function provision(parts: { torch: boolean; venv: boolean; node24: boolean; portkey?: boolean }): void {
  const step = (what: string, install: () => void): void => {
    try {
      install();
    } catch (error) {
      if (!(error instanceof ProvisionError)) throw error;
      console.error(`bench: ${what} could not be provisioned here (${error.message}); the rows that need it say so`);
    }
  };
  if (parts.torch) {
    step("Debian's PyTorch", () =>
      ensureApt([
        { name: 'python3-torch', why: "the trainer worker's PyTorch for the trainer rows" },
        { name: 'libopenblas0-pthread', why: 'a fast BLAS for that PyTorch' },
      ]),
    );
  }
  if (parts.venv && !process.env.LIGHTNING_TEST_PYTHON)
    step('the test venv', () => (process.env.LIGHTNING_TEST_PYTHON = ensurePythonVenv()));
  if (parts.node24 && !process.env.LIGHTNING_NODE24)
    step('Node 24', () => (process.env.LIGHTNING_NODE24 = ensureNode(24).node));
  if (parts.portkey) step('the Portkey gateway', () => (portkeyScript = ensurePortkeyGateway()));
}

/** The proxy against its peer gateway: provisioned above, or a row saying why it could not run. */
function gatewaySection(work: string): Promise<void> {
  return section('proxy vs Portkey gateway', () => {
    if (!portkeyScript) throw new Error('the Portkey gateway could not be provisioned (see above)');
    return gatewayBenchmark(work, portkeyScript);
  });
}

/** OTLP ingest, then what the store's page size does to its commits (a batch of spans, one span). */
async function otlpIngestSection(dir: string): Promise<void> {
  await otlpBenchmark(dir);
  pageSizeBenchmark(dir);
}

/** Runs one benchmark; one that throws becomes a row saying so, and the others' rows are kept. */
async function section(name: string, run: () => unknown): Promise<void> {
  const before = rows.length;
  try {
    await run();
  } catch (error) {
    const message = (error instanceof Error ? error.message : String(error)).split('\n')[0]!.slice(0, 200);
    console.error(`bench: ${name} failed:`, error);
    rows.push({
      metric: `${name} (${rows.length - before} row(s) before it stopped)`,
      result: `FAILED: ${message}`,
      baseline: '—',
      ratio: '—',
      target: '—',
      met: 'NO',
    });
  }
  sections.push({ name, rows: rows.slice(before) });
}

const only = (flag: string): boolean => process.argv.includes(flag);

async function main(): Promise<void> {
  console.error(`bench: ${os.cpus().length} CPU(s), node ${process.version}, working in ${work}`);
  const storeOnly = only('--store-only');
  if (only('--packaging-only')) {
    provision({ torch: false, venv: false, node24: true });
    await section('packaging', () => packagingBenchmark(work));
  } else if (only('--bundle-only')) {
    await section('bundle', () => bundleBenchmark(work));
  } else if (only('--trainer-only')) {
    provision({ torch: true, venv: true, node24: false });
    await section('trainer', () => trainerBenchmark());
  } else if (only('--proxy-only')) {
    provision({ torch: false, venv: false, node24: false, portkey: true });
    await gatewaySection(work);
    await section('proxy', () => proxyBenchmarks(work));
  } else if (only('--otlp-only')) {
    await section('OTLP ingest', () => otlpIngestSection(work));
    await section('OTLP fairness', () => otlpFairnessBenchmark(work));
    await section('OTLP memory', () => otlpMemoryBenchmark(work));
  } else if (only('--checkpoints-only')) {
    provision({ torch: true, venv: true, node24: false });
    await section('checkpoints', () => checkpointsBenchmark(work));
  } else if (only('--policies-only')) {
    provision({ torch: false, venv: true, node24: false });
    await section('several policies', () => policiesBenchmark(work));
  } else if (only('--scale-only')) {
    provision({ torch: true, venv: true, node24: false });
    await section('scale', () => scaleBenchmark(work));
  } else {
    if (!storeOnly) provision({ torch: true, venv: true, node24: true, portkey: true });
    await section('bundle', () => bundleBenchmark(work));
    await section('span ingest', () => spanIngest());
    await section('rollout lifecycle', () => lifecycle());
    await section('100k-rollout store', async () => {
      const large = path.join(work, 'large', 'store.db');
      seedRollouts(large, 100_000);
      await listOverRpc(large);
      await readyTime(large);
    });
    await section('LightningRL', () => lightningRlBenchmark(work));
    await section('editor', () => editorBenchmark());
    await section('runner', () => runnerBenchmark(work));
    await section('rewards', () => rewardsBenchmark(work));
    if (!storeOnly) {
      await section('OTLP ingest', () => otlpIngestSection(work));
      await section('OTLP fairness', () => otlpFairnessBenchmark(work));
      await section('OTLP memory', () => otlpMemoryBenchmark(work));
      await section('proxy', () => proxyBenchmarks(work));
      await gatewaySection(work);
      await section('trainer', () => trainerBenchmark());
      await section('checkpoints', () => checkpointsBenchmark(work));
      await section('several policies', () => policiesBenchmark(work));
      await section('packaging', () => packagingBenchmark(work));
      await section('scale', () => scaleBenchmark(work));
    }
  }
  printTable();
  // The measured tables in the docs, regenerated from this run (the sections it ran; the others stay as they were).
  const doc = path.join(__dirname, '..', '..', 'docs', 'benchmarks.md');
  writeBenchmarksDoc(doc, machineLine(process.argv.slice(2)));
  console.error(
    `bench: wrote the tables of ${sections.map((s) => s.name).join(', ')} into ${path.relative(process.cwd(), doc)}`,
  );
  if (rows.some((row) => row.result.startsWith('FAILED'))) process.exitCode = 1;
}

main()
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => fs.rmSync(work, { recursive: true, force: true }));
