// `npm test`: provisions what the suites need (test/provision/: Debian packages as root, the trainer worker's test
// venv, the e2e suite's VS Code and browser driver, Node 24), then runs them with node's test runner (TypeScript
// through tsx) and pytest, and ends with the line `N passed, N failed`. A suite that cannot run is a failure.
// Usage: node test/run.mjs [fast|unit|integration|e2e|python|node24|FILE…]   (default: all but fast)
//   fast     unit + the integration files that declare no needs (test/provision/needs.mjs): nothing provisioned,
//            PyTorch hidden
//   node24   the store's tests again under Node 24 (the node:sqlite driver; Node 20 runs better-sqlite3)
// Each chosen file's `// needs:` line says what to provision for it; only that is provisioned.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  ensureApt,
  ensureBrowserDriver,
  ensureEditor,
  ensureNode,
  ensurePythonVenv,
  EDITORS,
  prebuild,
  ProvisionError,
  REPO,
} from './provision/index.mjs';
import { needsOf, torchShim } from './provision/needs.mjs';

const root = path.join(REPO, 'test');
const SUITES = ['unit', 'integration', 'e2e', 'python', 'node24'];
const TIERS = ['fast', ...SUITES];
/** The test files that run a second time under Node 24, where the store opens with node:sqlite. */
const NODE24_FILES = [
  'storeDriver',
  'migrations',
  'store',
  'storeQueries',
  'writeQueue',
  'rolloutTransitions',
  'datasets',
  'training',
  'useCheckpoint',
  'rewardRules',
  'lightningrl',
  'apo',
  'rewardPipeline',
  'batchLock',
].map((name) => `test/unit/${name}.test.ts`);

function testFiles(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => path.join(entry.parentPath ?? entry.path, entry.name))
    .sort();
}

const args = process.argv.slice(2);
const suites = args.length ? args : SUITES;
const fast = suites.includes('fast');
const files = suites
  .filter((arg) => arg !== 'python' && arg !== 'node24')
  .flatMap((arg) => {
    if (arg === 'fast')
      return [...testFiles(path.join(root, 'unit')), ...testFiles(path.join(root, 'integration'))].filter(
        (file) => needsOf(file).size === 0,
      );
    const dir = path.join(root, arg);
    if (fs.existsSync(dir) && fs.statSync(dir).isDirectory()) return testFiles(dir);
    const file = path.resolve(arg);
    if (!fs.existsSync(file)) {
      console.error(`no suite or test file "${arg}" (suites: ${TIERS.join(', ')})`);
      process.exit(1);
    }
    return [file];
  });
const withPython = suites.includes('python');
const withNode24 = suites.includes('node24');
const inE2e = (file) => file.includes(`${path.sep}e2e${path.sep}`);

/** Everything the chosen files (and suites) need, installed or found before any test starts; the env the tests get. */
async function provision() {
  const env = {};
  const needs = new Set(files.flatMap((file) => [...needsOf(file)]));
  if (withPython) needs.add('venv');
  if (withNode24) needs.add('node24');
  const rootOnly = files.filter((file) => needsOf(file).has('root'));
  if (rootOnly.length > 0 && process.getuid?.() !== 0) {
    throw new ProvisionError(
      `${rootOnly.map((file) => path.relative(REPO, file)).join(' and ')} need root (a mount namespace, a tmpfs). Run:\n  sudo npm test\nor run the other suites: npm test -- fast unit python node24`,
    );
  }
  const apt = [];
  // The trainer worker in the daemon's tests and the demo runs on Debian's PyTorch (fast on few cores).
  if (needs.has('torch')) {
    apt.push({ name: 'python3-torch', why: "the trainer worker's PyTorch in the training tests" });
    apt.push({ name: 'libopenblas0-pthread', why: 'a fast BLAS for that PyTorch (the reference BLAS is ~15x slower)' });
  }
  if (needs.has('unzip')) apt.push({ name: 'unzip', why: "the package test reads each VSIX's files" });
  // The venv, the two editors and the browser driver built side by side (each mostly one busy core); the calls below
  // then find them built, or build one in the foreground and say why it cannot be.
  const groups = [];
  if (needs.has('venv')) groups.push(['python']);
  if (needs.has('editor')) groups.push(['editor-oldest'], ['driver']);
  if (needs.has('editor') || needs.has('node24'))
    groups.push([...(needs.has('node24') ? ['node24'] : []), ...(needs.has('editor') ? ['editor-current'] : [])]);
  await prebuild(groups, apt);
  if (apt.length > 0) ensureApt(apt);
  // PyTorch 2 + transformers + peft + trl, Ray and the agent SDKs: pytest, the Ray and the Python SDK tests run on it.
  if (needs.has('venv')) env.LIGHTNING_TEST_PYTHON = ensurePythonVenv();
  if (needs.has('node24')) env.LIGHTNING_NODE24 = ensureNode(24).node;
  if (needs.has('editor')) {
    env.LIGHTNING_E2E_DRIVER = ensureBrowserDriver();
    for (const which of Object.keys(EDITORS)) {
      const editor = ensureEditor(which);
      env[`LIGHTNING_E2E_CODE_SERVER_${which.toUpperCase()}`] = editor.codeServer;
      env[`LIGHTNING_E2E_PATH_${which.toUpperCase()}`] = editor.env.PATH;
    }
  }
  if (fast) {
    // PyTorch hidden, so a file in the fast tier that quietly needs it fails instead of passing where it is installed.
    const shim = torchShim(fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-fast-')));
    env.PYTHONPATH = [shim, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter);
    for (const name of ['LIGHTNING_TEST_PYTHON', 'LIGHTNING_NODE24']) env[name] = '';
  }
  return env;
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

const NONE = { ok: true, passed: 0, failed: 0 };
/** The spec reporter's "failing tests" sections, repeated before the last line (a log's tail then shows why). */
const FAILURES = [];

/**
 * Test files that start a local Ray head (`// needs: ray`) run one at a time, after the others: a head's worker
 * processes beside another file's load starved a test's agents on the 2-core CI machine (each head also has ports
 * of its own, see test/helpers/ray.ts#startRayHead).
 */
const startsRay = (file) => needsOf(file).has('ray');

function sum(results) {
  return results.reduce(
    (a, b) => ({ ok: a.ok && b.ok, passed: a.passed + b.passed, failed: a.failed + b.failed }),
    NONE,
  );
}

/** Where the run's time went, by phase (printed before the last line, so CI's log says what to shorten). */
const PHASES = [];

/** Runs `fn` (sync or async), adding its wall time to PHASES as `name`. */
async function timed(name, fn) {
  const started = performance.now();
  const result = await fn();
  PHASES.push({ name, seconds: (performance.now() - started) / 1000 });
  return result;
}

/**
 * The files that need nothing run several to a process. Node's runner starts a process per file, and each paid ~0.65
 * CPU-s to start and to load its sources through tsx: the 51 unit files of 2026-12-05 took 49 CPU-s in their own
 * processes, 16 in one. A group is a generated file that requires its members in turn (Node ≥ 22.8's test isolation
 * "none" does this; CI's Node is 20), so their tests run one after another as a file's do; a member that cannot load
 * fails as a test named after it and the others still run. Files with needs (PyTorch, Ray, an editor) keep a process
 * each: their own start-up is small beside their work. Members are dealt round-robin, so that the slow files of a kind
 * (the APO runs, alphabetically together) land in different groups.
 */
const GROUP_SIZE = 6;
const GROUPS = new Set();
function grouped(list) {
  const alone = list.filter((file) => needsOf(file).size > 0);
  const members = list.filter((file) => needsOf(file).size === 0);
  if (members.length <= 1) return list;
  const count = Math.ceil(members.length / GROUP_SIZE);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-test-groups-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const groups = Array.from({ length: count }, (_, index) => {
    const group = members.filter((_, i) => i % count === index);
    const file = path.join(dir, `group-${String(index + 1).padStart(2, '0')}-of-${count}.test.cjs`);
    fs.writeFileSync(
      file,
      [
        `// Written by test/run.mjs: these test files in one process (see grouped()).`,
        `const { test } = require('node:test');`,
        `for (const [file, name] of ${JSON.stringify(group.map((member) => [member, path.relative(REPO, member)]))}) {`,
        `  try {`,
        `    require(file);`,
        `  } catch (error) {`,
        `    test(\`\${name} loads\`, () => {`,
        `      throw error;`,
        `    });`,
        `  }`,
        `}`,
        '',
      ].join('\n'),
    );
    GROUPS.add(file);
    return file;
  });
  return [...groups, ...alone];
}

/**
 * How many test files run at once. The fast tier's files wait on sockets and child processes for part of their time
 * (a third of the wall time of the slowest, run alone): a third file at once fills those gaps. On this 2-core machine,
 * idle, the tier took 174 s two at a time, 144–145 s three at a time and 139 s four at a time (702 tests each). Any
 * other run keeps two (`npm test`, and `npm test -- fast e2e`): its files with needs (PyTorch training, an editor in a
 * browser) keep both cores busy alone, and their timing checks were measured so. TEST_CONCURRENCY sets it.
 */
const CONCURRENCY = process.env.TEST_CONCURRENCY ?? (fast && suites.length === 1 ? 3 : 2);

/** node's test runner over `list` with `node`: the Ray files alone after the rest (startsRay). */
async function nodeTests(list, env, node = process.execPath, label = '') {
  const alone = list.filter(startsRay);
  const rest = list.filter((file) => !startsRay(file));
  return sum([
    await timed(`node tests${label} (${rest.length} files)`, () => nodeTestRun(grouped(rest), env, node, CONCURRENCY)),
    alone.length > 0
      ? await timed(`Ray files one at a time (${alone.length})`, () => nodeTestRun(alone, env, node, 1))
      : NONE,
  ]);
}

/** One run of node's test runner; counts from its spec reporter's summary. */
async function nodeTestRun(list, env, node, concurrency) {
  if (list.length === 0) return NONE;
  // Each file is one test under --test-timeout, and node's runner has one timeout for all files: with the
  // end-to-end suites in the run (a real VS Code each, minutes each on a busy machine) or a group of files (up to six
  // files' tests one after another) it is ten minutes.
  const timeout = list.some((file) => inE2e(file) || GROUPS.has(file)) ? 600_000 : 300_000;
  // tsx's CommonJS hook only (the test files and the sources are CommonJS): `--import tsx` also starts its ESM
  // loader's hooks thread in every process, ~0.2 s of CPU per test file here.
  const { code, output } = await run(
    node,
    [
      '--require',
      'tsx/cjs',
      '--test',
      '--test-reporter=spec',
      `--test-timeout=${timeout}`,
      `--test-concurrency=${concurrency}`,
      ...list,
    ],
    { env: { ...process.env, ...env }, cwd: REPO },
  );
  const count = (name) => Number(output.match(new RegExp(`^ℹ ${name} (\\d+)$`, 'm'))?.[1] ?? 0);
  const failures = output.match(/^✖ failing tests:\n[\s\S]*/m)?.[0];
  if (failures) FAILURES.push(failures.trimEnd().slice(0, 20_000));
  const result = { ok: code === 0, passed: count('pass'), failed: count('fail') + count('cancelled') };
  // A file that cannot even load counts once; skipped tests count as failures (no suite may skip silently).
  result.failed += count('skipped') + count('todo');
  if (code !== 0 && result.failed === 0) result.failed = 1;
  return result;
}

/**
 * pytest's processes (pytest-xdist): each test runs on one torch thread (conftest.py), so one process used one core —
 * 1.1 of CI's 2 over its 260 s here (166 s on two). `worksteal` hands a worker that ran out of tests some of the
 * other's: the torchrun and FSDP files take minutes beside tests of a second. At most four: the torchrun tests start
 * 2–3 ranks each.
 */
const PYTEST_WORKERS = Math.min(4, Math.max(1, os.availableParallelism()));

/** The trainer worker's pytest suite; pytest's last line gives the counts ("3 passed, 1 failed, 2 errors in 9s"). */
async function pythonTests(python) {
  const { code, output } = await run(
    python,
    [
      '-m',
      'pytest',
      '-q',
      '-p',
      'no:cacheprovider',
      '-n',
      String(PYTEST_WORKERS),
      '--dist',
      'worksteal',
      'trainer-daemon/python/tests',
    ],
    { cwd: REPO },
  );
  const summary = output.trim().split('\n').pop() ?? '';
  const count = (name) => Number(summary.match(new RegExp(`(\\d+) ${name}`))?.[1] ?? 0);
  if (code !== 0 && count('failed') + count('errors?') === 0)
    console.error(`python tests did not run (${python} exited ${code})`);
  // A skipped Python test is a failure too: the suite's environment is provisioned, nothing may be missing.
  const failed = count('failed') + count('errors?') + count('skipped');
  return { ok: code === 0 && failed === 0, passed: count('passed'), failed: Math.max(failed, code === 0 ? 0 : 1) };
}

let env;
try {
  env = await timed('provisioning', provision);
} catch (error) {
  if (!(error instanceof ProvisionError)) throw error;
  console.error(`npm test: cannot run the suites here: ${error.message}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}

const results = [await nodeTests(files, env)];
if (withPython) results.push(await timed('pytest', () => pythonTests(env.LIGHTNING_TEST_PYTHON)));
if (withNode24) {
  console.log(`npm test: the store's tests under Node 24 (${env.LIGHTNING_NODE24})`);
  results.push(
    await nodeTests(
      NODE24_FILES.map((file) => path.join(REPO, file)),
      env,
      env.LIGHTNING_NODE24,
      ' again under Node 24',
    ),
  );
}
console.log(
  `npm test: where the time went: ${PHASES.map((phase) => `${phase.name} ${Math.round(phase.seconds)} s`).join(' · ')}`,
);
if (FAILURES.length > 0) console.log(`\nnpm test: the failures again (from above):\n${FAILURES.join('\n')}\n`);
const passed = results.reduce((sum, r) => sum + r.passed, 0);
const failed = results.reduce((sum, r) => sum + r.failed, 0);
console.log(`${passed} passed, ${failed} failed`);
process.exit(results.every((r) => r.ok) && failed === 0 && passed > 0 ? 0 : 1);
