/**
 * `npm run bench:learning`: the demo's learning evidence. Runs `npm run demo` (dist/demo.js) once per
 * seed in a fresh folder and reads the run back from its store: reward per iteration, before → after,
 * as a table, and one chart with every seed. Too slow for `npm run bench` (minutes per seed on 2 cores).
 * Wall time and CPU time (user + system of the demo and every process it started, from GNU time when
 * /usr/bin/time exists: on a shared machine the CPU time is the steadier number), and the first iteration
 * whose validation reward reached 0.8 and 0.9 (validation runs every few iterations, so this is an upper bound),
 * and the seconds from the demo's start to that 0.9 validation.
 *
 * Usage: node --import tsx test/bench/learning.ts [--seeds 0,1,2] [--iterations N] [--chart FILE.svg]
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { metricPoints } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { renderCurvesSvg } from '../../trainer-daemon/training/chartFile';
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
  /** The run's validation and sampled reward by iteration, for the chart of every seed. */
  curves: { step: number; name: string; value: number }[];
  cpuSeconds: number | undefined;
  firstAt: Record<'0.8' | '0.9', number | undefined>;
  /** Seconds from the demo's start to the validation that first reached 0.9 (from the metric's time). */
  secondsTo09: number | undefined;
}

const GNU_TIME = '/usr/bin/time';

async function runSeed(seed: number, iterations: number, work: string): Promise<SeedResult> {
  const cwd = path.join(work, `seed-${seed}`);
  fs.mkdirSync(cwd, { recursive: true });
  const started = performance.now();
  const startedMs = Date.now();
  const timing = path.join(cwd, 'cpu-seconds');
  const demo = [process.execPath, path.join(REPO_ROOT, 'dist', 'demo.js')];
  const argv = fs.existsSync(GNU_TIME) ? [GNU_TIME, '-f', '%U %S', '-o', timing, ...demo] : demo;
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      cwd,
      env: { ...process.env, LIGHTNING_DEMO_SEED: String(seed), LIGHTNING_DEMO_ITERATIONS: String(iterations) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    child.stdout.on('data', (chunk: Buffer) => process.stderr.write(`[seed ${seed}] ${chunk.toString()}`));
    child.on('close', resolve);
  });
  const seconds = (performance.now() - started) / 1000;
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  try {
    const run = store.trainingRunRecords()[0]!;
    const detail = store.getTrainingRun(run.id);
    fs.copyFileSync(path.join(cwd, '.lightning', 'demo', `${run.id}.html`), path.join(work, `seed-${seed}.html`));
    const val = metricPoints(detail.metrics, 'val/reward');
    const cpu = fs.existsSync(timing)
      ? fs.readFileSync(timing, 'utf8').trim().split('\n').at(-1)!.split(' ').map(Number)
      : [];
    const firstAt = (level: number): number | undefined => val.find((p) => p.value >= level)?.step;
    const reached = val.find((p) => p.value >= 0.9);
    return {
      secondsTo09: reached === undefined ? undefined : (reached.timeMs - startedMs) / 1000,
      cpuSeconds: cpu.length === 2 && cpu.every(Number.isFinite) ? cpu[0]! + cpu[1]! : undefined,
      firstAt: { '0.8': firstAt(0.8), '0.9': firstAt(0.9) },
      seed,
      seconds,
      status: code === 0 ? run.status : `${run.status} (exit ${code})`,
      valBefore: val[0]?.value,
      valAfter: val.at(-1)?.value,
      sampled: metricPoints(detail.metrics, 'reward/mean').map((p) => p.value),
      curves: [
        ...val.map((p) => ({ step: p.step, name: `seed ${seed}: validation (greedy)`, value: p.value })),
        ...metricPoints(detail.metrics, 'reward/mean').map((p) => ({
          step: p.step,
          name: `seed ${seed}: sampled`,
          value: p.value,
        })),
      ],
    };
  } finally {
    store.close();
  }
}

async function main(): Promise<void> {
  const seeds = flag('--seeds', '0,1,2').split(',').map(Number);
  const iterations = Number(flag('--iterations', '40'));
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-learning-'));
  console.error(
    `bench:learning: ${os.cpus().length} CPU(s), seeds ${seeds.join(', ')}, ${iterations} iterations each, in ${work}`,
  );
  const results: SeedResult[] = [];
  for (const seed of seeds) results.push(await runSeed(seed, iterations, work));
  const mean = (values: number[]): number => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
  const v = (x: number | undefined): string => (x === undefined ? '-' : fmt(x, 2));
  const at = (x: number | undefined): string => (x === undefined ? 'not reached' : String(x));
  console.log(
    `| seed | greedy val reward before → after | iterations to val 0.8 / 0.9 | s to val 0.9 | sampled reward, first 5 → last 5 iterations | per iteration (every 5th) | status | wall s | CPU s |`,
  );
  console.log(`|---|---|---|---|---|---|---|---|---|`);
  for (const r of results) {
    const curve = r.sampled
      .filter((_, i) => i % 5 === 0)
      .map((x) => fmt(x, 2))
      .join(' ');
    console.log(
      `| ${r.seed} | ${v(r.valBefore)} → ${v(r.valAfter)} | ${at(r.firstAt['0.8'])} / ${at(r.firstAt['0.9'])} | ${r.secondsTo09 === undefined ? '-' : fmt(r.secondsTo09)} | ${v(mean(r.sampled.slice(0, 5)))} → ${v(mean(r.sampled.slice(-5)))} | ${curve} | ${r.status} | ${fmt(r.seconds)} | ${r.cpuSeconds === undefined ? '-' : fmt(r.cpuSeconds)} |`,
    );
  }
  const chart = flag('--chart', path.join(work, 'learning.svg'));
  fs.writeFileSync(
    chart,
    renderCurvesSvg(
      results.flatMap((r) => r.curves),
      `npm run demo: reward by GRPO iteration, seeds ${seeds.join(', ')}`,
    ),
  );
  console.log(
    `chart of every seed: ${chart}; each run's charts: ${results.map((r) => path.join(work, `seed-${r.seed}.html`)).join(' ')}`,
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
