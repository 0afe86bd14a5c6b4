/**
 * The bundles' sizes, from esbuild's metafile of a fresh build. The extension (issue: ≤ 500 KB without
 * native modules): the whole `dist/extension.js` against the bytes its dependencies alone put in it. The
 * webview's two pages (the side panel, the editor tabs): each one's script and stylesheet, which the page
 * carries inline (extension/webviewHtml.ts), against its dependencies alone; the pages ship no zod (they
 * import only the protocol's types; the extension validates what crosses into it). And the CLI's start-up through its
 * code cache.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fmt, median, processCpuMs, rows } from './table';

interface Output {
  bytes: number;
  inputs: Record<string, { bytesInOutput: number }>;
}
interface Metafile {
  outputs: Record<string, Output>;
}

const ROOT = path.resolve(__dirname, '..', '..');
const TARGET_BYTES = 500 * 1024;

/** Bytes per npm package in these outputs (our own code under `(ours)`). */
function byPackage(outputs: readonly Output[]): Map<string, number> {
  const packages = new Map<string, number>();
  for (const output of outputs) {
    for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
      const name = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input)?.[1] ?? '(ours)';
      packages.set(name, (packages.get(name) ?? 0) + bytesInOutput);
    }
  }
  return packages;
}

function largest(packages: Map<string, number>): string {
  return [...packages]
    .filter(([name]) => name !== '(ours)')
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([name, bytes]) => `${name} ${fmt(bytes / 1024)}`)
    .join(', ');
}

/** The CPU (user + system) this process's exited children have used so far, in ms. */
function childrenCpuMs(): number {
  const cpu = processCpuMs(process.pid);
  if (!cpu) throw new Error('no CPU times here: the start-up row reads /proc (Linux)');
  return cpu.children;
}

/** One `node ARGS…` to its exit: wall time and CPU, in ms. */
function timedRun(args: readonly string[]): { wall: number; cpu: number } {
  const cpu = childrenCpuMs();
  const started = performance.now();
  const run = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`node ${args.join(' ')} exited ${run.status}: ${run.stderr}`);
  return { wall: performance.now() - started, cpu: childrenCpuMs() - cpu };
}

/**
 * A short command's start-up: `lightning --version` through dist/cli.js, which runs the program through its V8 code
 * cache (trainer-daemon/cliLauncher.ts), against the same program started without it (`node dist/cli-main.js`);
 * interleaved, medians. The launcher's first start writes the cache; it is left out.
 */
function cliStartup(): void {
  const runs = 15;
  timedRun(['dist/cli.js', '--version']);
  const launcher: Array<{ wall: number; cpu: number }> = [];
  const plain: Array<{ wall: number; cpu: number }> = [];
  for (let i = 0; i < runs; i += 1) {
    launcher.push(timedRun(['dist/cli.js', '--version']));
    plain.push(timedRun(['dist/cli-main.js', '--version']));
  }
  const wall = median(launcher.map((r) => r.wall));
  const baseWall = median(plain.map((r) => r.wall));
  const cpu = median(launcher.map((r) => r.cpu));
  const baseCpu = median(plain.map((r) => r.cpu));
  rows.push({
    metric: `CLI start-up: \`lightning --version\` through dist/cli.js (V8 code cache) vs the program without it (median of ${runs}, interleaved)`,
    result: `${fmt(wall)} ms (CPU ${fmt(cpu)} ms)`,
    baseline: `${fmt(baseWall)} ms (CPU ${fmt(baseCpu)} ms): \`node dist/cli-main.js --version\``,
    ratio: `${fmt(wall / baseWall, 2)}×`,
    target: '(report)',
    met: '-',
  });
}

export function bundleBenchmark(work: string): void {
  const file = path.join(work, 'esbuild-meta.json');
  const build = spawnSync(process.execPath, ['esbuild.mjs', `--metafile=${file}`], { cwd: ROOT, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`build failed: ${build.stderr}`);
  const outputs = (JSON.parse(fs.readFileSync(file, 'utf8')) as Metafile).outputs;
  const output = outputs['dist/extension.js'];
  if (!output) throw new Error('the build wrote no dist/extension.js');
  const packages = byPackage([output]);
  const dependencies = output.bytes - (packages.get('(ours)') ?? 0);
  rows.push({
    metric: 'extension bundle, dist/extension.js (minified; native modules and vscode external)',
    result: `${fmt(output.bytes / 1024)} KB (our code ${fmt((output.bytes - dependencies) / 1024)} KB)`,
    baseline: `${fmt(dependencies / 1024)} KB: its dependencies alone (${largest(packages)})`,
    ratio: `${fmt(output.bytes / dependencies, 2)}×`,
    target: '≤ 500 KB',
    met: output.bytes <= TARGET_BYTES ? 'yes' : 'NO',
  });
  for (const [entry, page] of [
    ['webview', 'side panel'],
    ['editor', 'editor tab'],
  ] as const) {
    const loaded = [`dist/${entry}.js`, `dist/${entry}.css`].map((name) => {
      const built = outputs[name];
      if (!built) throw new Error(`the build wrote no ${name}`);
      return built;
    });
    const bytes = loaded.reduce((sum, item) => sum + item.bytes, 0);
    const pagePackages = byPackage(loaded);
    const pageDependencies = [...pagePackages]
      .filter(([name]) => name !== '(ours)')
      .reduce((sum, [, size]) => sum + size, 0);
    const zod = pagePackages.get('zod') ?? 0;
    rows.push({
      metric: `${page} page's script and style, dist/${entry}.js + .css (minified, inline in the page)`,
      result: `${fmt(bytes / 1024)} KB (zod ${fmt(zod / 1024)} KB)`,
      baseline: `${fmt(pageDependencies / 1024)} KB: its dependencies alone (${largest(pagePackages)})`,
      ratio: `${fmt(bytes / pageDependencies, 2)}×`,
      target: 'no zod',
      met: zod === 0 ? 'yes' : 'NO',
    });
  }
  cliStartup();
}
