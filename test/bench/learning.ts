/**
 * `npm run bench:learning`: the demo's learning evidence. Runs `npm run demo` (dist/demo.js) once per
 * seed in a fresh folder and reads the run back from its store: reward per iteration, before → after,
 * as a table, and one chart with every seed. Too slow for `npm run bench` (minutes per seed on 2 cores).
 *
 * Usage: node --import tsx test/bench/learning.ts [--seeds 0,1,2] [--iterations N]
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { metricPoints } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT } from '../helpers/daemon';
import { fmt } from './table';

function flag(name: string, fallback: string): string {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1]! : fallback;
}

interface SeedResult {
  seed: number;
  seconds: number;
  status: string;
  valBefore: number | undefined;
  valAfter: number | undefined;
  sampled: number[];
}

async function runSeed(seed: number, iterations: number, work: string): Promise<SeedResult> {
  const cwd = path.join(work, `seed-${seed}`);
  fs.mkdirSync(cwd, { recursive: true });
  const started = performance.now();
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'demo.js')], {
      cwd,
      env: { ...process.env, LIGHTNING_DEMO_SEED: String(seed), LIGHTNING_DEMO_ITERATIONS: String(iterations) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    child.stdout.on('data', (chunk: Buffer) => process.stderr.write(`[seed ${seed}] ${chunk}`));
    child.on('close', resolve);
  });
  const seconds = (performance.now() - started) / 1000;
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  try {
    const run = store.trainingRunRecords()[0]!;
    const detail = store.getTrainingRun(run.id);
    fs.copyFileSync(path.join(cwd, '.lightning', 'demo', `${run.id}.html`), path.join(work, `seed-${seed}.html`));
    const val = metricPoints(detail.metrics, 'val/reward');
    return {
      seed,
      seconds,
      status: code === 0 ? run.status : `${run.status} (exit ${code})`,
      valBefore: val[0]?.value,
      valAfter: val.at(-1)?.value,
      sampled: metricPoints(detail.metrics, 'reward/mean').map((p) => p.value),
    };
  } finally {
    store.close();
  }
}

async function main(): Promise<void> {
  const seeds = flag('--seeds', '0,1,2').split(',').map(Number);
  const iterations = Number(flag('--iterations', '40'));
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-learning-'));
  console.error(`bench:learning: ${os.cpus().length} CPU(s), seeds ${seeds.join(', ')}, ${iterations} iterations each, in ${work}`);
  const results: SeedResult[] = [];
  for (const seed of seeds) results.push(await runSeed(seed, iterations, work));
  const mean = (values: number[]): number => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
  const v = (x: number | undefined): string => (x === undefined ? '-' : fmt(x, 2));
  console.log(`| seed | greedy val reward before → after | sampled reward, first 5 → last 5 iterations | per iteration (every 5th) | status | wall s |`);
  console.log(`|---|---|---|---|---|---|`);
  for (const r of results) {
    const curve = r.sampled.filter((_, i) => i % 5 === 0).map((x) => fmt(x, 2)).join(' ');
    console.log(`| ${r.seed} | ${v(r.valBefore)} → ${v(r.valAfter)} | ${v(mean(r.sampled.slice(0, 5)))} → ${v(mean(r.sampled.slice(-5)))} | ${curve} | ${r.status} | ${fmt(r.seconds)} |`);
  }
  console.log(`charts: ${results.map((r) => path.join(work, `seed-${r.seed}.html`)).join(' ')}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
