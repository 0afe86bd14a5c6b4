// Runs the test suites with node's test runner (TypeScript through tsx) and ends with the line
// `N passed, N failed`. Node 20's runner takes no globs, so the files are listed here.
// Usage: node test/run.mjs [unit|integration|e2e|python|FILE…]   (default: all four)
// `python` runs the trainer worker's pytest suite with /usr/bin/python3 (or $LIGHTNING_PYTHON); its counts join the total.
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
const suites = args.length ? args : ['unit', 'integration', 'e2e', 'python'];
const withPython = suites.includes('python');
const files = suites.filter((arg) => arg !== 'python').flatMap((arg) => (fs.existsSync(path.join(root, arg)) && fs.statSync(path.join(root, arg)).isDirectory() ? testFiles(path.join(root, arg)) : [path.resolve(arg)]));
if (files.length === 0 && !withPython) {
  console.error(`no test files in ${suites.join(', ')}`);
  process.exit(1);
}

/** Runs a test command, echoing its stdout; resolves with its exit code and output. */
function run(command, commandArgs, options = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, commandArgs, { stdio: ['ignore', 'pipe', 'inherit'], ...options });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      output += chunk;
      process.stdout.write(chunk);
    });
    child.on('error', (error) => resolve({ code: 1, output: `${command}: ${error.message}\n` }));
    child.on('close', (code) => resolve({ code, output }));
  });
}

// Each file is one test under --test-timeout, and node's runner has one timeout for all files: with the
// end-to-end suites in the run (a real VS Code each, over two minutes each on a busy machine) it is ten minutes.
const timeout = files.some((file) => file.includes(`${path.sep}e2e${path.sep}`)) ? 600_000 : 120_000;

async function nodeTests() {
  if (files.length === 0) return { ok: true, passed: 0, failed: 0 };
  const { code, output } = await run(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=spec', `--test-timeout=${timeout}`, `--test-concurrency=${process.env.TEST_CONCURRENCY ?? 2}`, ...files]);
  const count = (name) => Number(output.match(new RegExp(`^ℹ ${name} (\\d+)$`, 'm'))?.[1] ?? 0);
  return { ok: code === 0, passed: count('pass'), failed: count('fail') + count('cancelled') };
}

/** The trainer worker's pytest suite; pytest's last line gives the counts ("3 passed, 1 failed, 2 errors in 9s"). */
async function pythonTests() {
  const python = process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3';
  const { code, output } = await run(python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'trainer-daemon/python/tests'], { cwd: path.dirname(root) });
  const summary = output.trim().split('\n').pop() ?? '';
  const count = (name) => Number(summary.match(new RegExp(`(\\d+) ${name}`))?.[1] ?? 0);
  if (code !== 0 && count('failed') + count('errors?') === 0) console.error(`python tests did not run (${python} exited ${code})`);
  return { ok: code === 0, passed: count('passed'), failed: Math.max(count('failed') + count('errors?'), code === 0 ? 0 : 1) };
}

const results = [await nodeTests(), withPython ? await pythonTests() : { ok: true, passed: 0, failed: 0 }];
const passed = results.reduce((sum, r) => sum + r.passed, 0);
const failed = results.reduce((sum, r) => sum + r.failed, 0);
console.log(`${passed} passed, ${failed} failed`);
process.exit(results.every((r) => r.ok) && failed === 0 && passed > 0 ? 0 : 1);
