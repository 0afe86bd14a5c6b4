/**
 * A real local Ray head for tests and benches: `ray start --head --block` on 127.0.0.1 with 2 CPUs (2 Ray worker
 * processes), in its own process group and temp dir, so that stopping it stops only this cluster.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { descendants, signalEach } from './processTree';
import { waitFor } from './tmp';

export interface RayHead {
  readonly address: string;
  /** `ray start --head`'s process: the head's processes are its descendants. */
  readonly pid: number;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.once('error', reject);
  });
}

/** The Python with ray from LIGHTNING_TEST_PYTHON; throws a clear error when it is unset or lacks ray. */
export function rayPython(): string {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  if (!python)
    throw new Error(
      'LIGHTNING_TEST_PYTHON is unset: point it at a Python with ray (trainer-daemon/python/requirements-test.txt)',
    );
  try {
    execFileSync(python, ['-c', 'import ray'], { stdio: 'pipe' });
  } catch {
    throw new Error(`${python} has no ray: ${python} -m pip install -r trainer-daemon/python/requirements-test.txt`);
  }
  return python;
}

/**
 * The head's ports besides the GCS port: each a free one, and the worker ports a range of 200 picked at random below
 * the ephemeral range, so that a second head on the machine (another test file, a user's own cluster) shares none of
 * Ray's fixed defaults (worker ports from 10002, the node agents' ports). The Ray client server (10001) is not started
 * by the minimal `ray` package (and `--ray-client-server-port` would require `ray[client]`).
 */
async function headPortFlags(): Promise<string[]> {
  const flags = [
    '--node-manager-port',
    '--object-manager-port',
    '--dashboard-agent-listen-port',
    '--dashboard-agent-grpc-port',
    '--runtime-env-agent-port',
    '--metrics-export-port',
  ];
  const ports: string[] = [];
  for (const flag of flags) ports.push(flag, String(await freePort()));
  const first = 20_000 + 200 * Math.floor(Math.random() * 60);
  return [...ports, '--min-worker-port', String(first), '--max-worker-port', String(first + 199)];
}

/** How long a stopped head's processes have to end on their SIGTERM before they are killed. */
const HEAD_STOP_GRACE_MS = 2_000;

/** `ray start --head` exited before its head answered `ray status`; the message holds what it and the head logged. */
class HeadExitedError extends Error {}

/**
 * A head, started again once (fresh ports and temp dir) when the first `ray start` exits before its head comes up, as
 * it did once in a CI run on a fresh machine (exit code 1 after ~20 s, the first head of the run); the first failure
 * is printed, so a second one that fails too shows both.
 */
export async function startRayHead(python: string, cpus = 2): Promise<RayHead> {
  try {
    return await startRayHeadOnce(python, cpus);
  } catch (error) {
    if (!(error instanceof HeadExitedError)) throw error;
    console.error(`ray: starting the head again, once: ${error.message}`);
    return startRayHeadOnce(python, cpus);
  }
}

/** The head's own logs that say why it did not come up, and how much of the end of each goes into the error. */
const HEAD_LOGS = ['gcs_server.out', 'gcs_server.err', 'raylet.out', 'raylet.err', 'monitor.log'];
const LOG_TAIL_CHARS = 1500;

/** The ends of the head's logs in `temp` (read before stop() removes it). */
function headLogs(temp: string): string {
  const dir = path.join(temp, 'session_latest', 'logs');
  return HEAD_LOGS.flatMap((name) => {
    try {
      const text = fs.readFileSync(path.join(dir, name), 'utf8').trim();
      return text ? [`--- ${name} (its end):\n${text.slice(-LOG_TAIL_CHARS)}`] : [];
    } catch {
      return [];
    }
  }).join('\n');
}

async function startRayHeadOnce(python: string, cpus: number): Promise<RayHead> {
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  // Ray's CLI through the Python we were given, not the `ray` script beside it: a venv's scripts name in their `#!` the
  // path the venv was built at, which a moved or shared venv (a worktree's .cache link) no longer has.
  const ray = (args: string[]): string[] => ['-m', 'ray.scripts.scripts', ...args];
  const temp = fs.mkdtempSync(path.join(os.tmpdir(), 'ray-'));
  const argv = [
    'start',
    '--head',
    '--block',
    '--node-ip-address',
    '127.0.0.1',
    '--port',
    String(port),
    ...(await headPortFlags()),
    '--num-cpus',
    String(cpus),
    '--include-dashboard=false',
    '--temp-dir',
    temp,
    '--disable-usage-stats',
  ];
  // Unbuffered: what `ray start` printed reaches the pipe even when it is killed.
  const head: ChildProcess = spawn(python, ray(argv), {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PYTHONUNBUFFERED: '1' },
  });
  // The end of what `ray start` printed (its last 4,096 characters), for the error when the head does not come up.
  let said = '';
  for (const stream of [head.stdout!, head.stderr!])
    stream.setEncoding('utf8').on('data', (chunk: string) => (said = (said + chunk).slice(-4096)));
  let cannotStart: string | undefined;
  let ended: string | undefined;
  let cameUp = false;
  head.once('error', (error) => (cannotStart = error.message));
  const exited = new Promise((resolve) => head.once('exit', resolve));
  // Once its output is read to the end ('close'), or a second after it exited if something it started holds the pipes.
  const endedAs = (): string => `exited (${head.signalCode ?? `code ${head.exitCode}`})`;
  head.once('close', () => (ended ??= endedAs()));
  void exited.then(() => setTimeout(() => (ended ??= endedAs()), 1000).unref());
  const stop = async (): Promise<void> => {
    const group = head.pid;
    if (group !== undefined && head.exitCode === null && head.signalCode === null) {
      // Ray starts its worker processes in sessions of their own, out of reach of the group's signal.
      const below = descendants(group);
      process.kill(-group, 'SIGTERM');
      signalEach(below, 'SIGTERM');
      // Once a driver has run tasks on it, `ray start --block` outlives a SIGTERM (it stopped only at the 20 s
      // SIGKILL that followed, in every Ray test file: 80 of the Ray files' 151 s); the cluster is a test's own and
      // its folder is removed below, so nothing is lost by not waiting for it.
      const kill = (): void => {
        try {
          process.kill(-group, 'SIGKILL');
        } catch {
          // ESRCH: the group has ended.
        }
        signalEach(below, 'SIGKILL');
      };
      const timer = setTimeout(kill, HEAD_STOP_GRACE_MS);
      await exited;
      clearTimeout(timer);
      // A head that ended on its SIGTERM may leave processes it started (its GCS server, its raylet) behind. Right
      // after its exit its group's id names only them: an id is not reused while a process of its group lives.
      kill();
    } else if (group !== undefined && !cameUp) {
      // `ray start` exited before its head came up, just now: what it had started in its group (a GCS server, a
      // raylet) must not outlive it. (Not later: the group's id may have been reused by then.)
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // ESRCH: nothing was left.
      }
    }
    fs.rmSync(temp, { recursive: true, force: true });
  };
  try {
    await waitFor(
      () => {
        if (cannotStart !== undefined)
          throw new Error(`\`ray start --head\` (${python}) could not start: ${cannotStart}`);
        if (ended !== undefined)
          throw new HeadExitedError(
            [
              `\`ray start --head\` (${python}) ${ended} before the head came up; it said:`,
              said.trim() || '(nothing)',
              headLogs(temp),
            ]
              .filter(Boolean)
              .join('\n'),
          );
        try {
          execFileSync(python, ray(['status', '--address', address]), { stdio: 'pipe', timeout: 20_000 });
          return true;
        } catch {
          return false;
        }
      },
      'the Ray head to come up',
      120_000,
    );
    cameUp = true;
  } catch (error) {
    await stop();
    throw error;
  }
  return { address, pid: head.pid!, stop };
}

/**
 * One Ray head for a test file's tests: the file calls `start` in `before` and `stop` in `after`; its tests read
 * `python` (from rayPython()) and `head`, which throw when read before `start` has finished.
 */
export interface RayFixture {
  readonly python: string;
  readonly head: RayHead;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function rayFixture(): RayFixture {
  let python: string | undefined;
  let head: RayHead | undefined;
  const notStarted = (): never => {
    throw new Error('the Ray head is not started: call start() in before() and read the fixture inside a test');
  };
  return {
    get python() {
      return python ?? notStarted();
    },
    get head() {
      return head ?? notStarted();
    },
    async start() {
      python = rayPython();
      head = await startRayHead(python);
    },
    async stop() {
      await head?.stop();
    },
  };
}
