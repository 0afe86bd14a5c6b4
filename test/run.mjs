// Runs the test suites with node's test runner (TypeScript through tsx) and ends with the line
// `N passed, N failed`. Node 20's runner takes no globs, so the files are listed here.
// Usage: node test/run.mjs [unit|integration|e2e|FILE…]   (default: all three)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.dirname(new URL(import.meta.url).pathname);

function testFiles(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => path.join(entry.parentPath ?? entry.path, entry.name))
    .sort();
}

const args = process.argv.slice(2);
const suites = args.length ? args : ['unit', 'integration', 'e2e'];
const files = suites.flatMap((arg) => (fs.existsSync(path.join(root, arg)) && fs.statSync(path.join(root, arg)).isDirectory() ? testFiles(path.join(root, arg)) : [path.resolve(arg)]));
if (files.length === 0) {
  console.error(`no test files in ${suites.join(', ')}`);
  process.exit(1);
}

// The limit applies to each file as a whole too: an e2e file (a workbench, several editor steps) takes
// one to two minutes on a loaded 2-core machine.
const child = spawn(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-reporter=spec', '--test-timeout=300000', `--test-concurrency=${process.env.TEST_CONCURRENCY ?? 2}`, ...files],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
let output = '';
child.stdout.setEncoding('utf8').on('data', (chunk) => {
  output += chunk;
  process.stdout.write(chunk);
});
child.on('close', (code) => {
  const count = (name) => Number(output.match(new RegExp(`^ℹ ${name} (\\d+)$`, 'm'))?.[1] ?? 0);
  const passed = count('pass');
  const failed = count('fail') + count('cancelled');
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(code === 0 && failed === 0 && passed > 0 ? 0 : 1);
});
