/**
 * The extension bundle's size (issue: ≤ 500 KB without native modules), from esbuild's metafile of a
 * fresh build: the whole `dist/extension.js` against the bytes its dependencies alone put in it.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fmt, rows } from './table';

interface Metafile {
  outputs: Record<string, { bytes: number; inputs: Record<string, { bytesInOutput: number }> }>;
}

const ROOT = path.resolve(__dirname, '..', '..');
const TARGET_BYTES = 500 * 1024;

export function bundleBenchmark(work: string): void {
  const file = path.join(work, 'esbuild-meta.json');
  const build = spawnSync(process.execPath, ['esbuild.mjs', `--metafile=${file}`], { cwd: ROOT, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`build failed: ${build.stderr}`);
  const output = (JSON.parse(fs.readFileSync(file, 'utf8')) as Metafile).outputs['dist/extension.js'];
  if (!output) throw new Error('the build wrote no dist/extension.js');
  const packages = new Map<string, number>();
  for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
    const name = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input)?.[1];
    if (name) packages.set(name, (packages.get(name) ?? 0) + bytesInOutput);
  }
  const dependencies = [...packages.values()].reduce((a, b) => a + b, 0);
  const largest = [...packages].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([name, bytes]) => `${name} ${fmt(bytes / 1024)}`).join(', ');
  rows.push({
    metric: 'extension bundle, dist/extension.js (minified; native modules and vscode external)',
    result: `${fmt(output.bytes / 1024)} KB (our code ${fmt((output.bytes - dependencies) / 1024)} KB)`,
    baseline: `${fmt(dependencies / 1024)} KB: its dependencies alone (${largest})`,
    ratio: `${fmt(output.bytes / dependencies, 2)}×`,
    target: '≤ 500 KB',
    met: output.bytes <= TARGET_BYTES ? 'yes' : 'NO',
  });
}
