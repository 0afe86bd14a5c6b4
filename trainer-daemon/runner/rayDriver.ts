/**
 * The Ray driver process (`python -m lightning_trainer.ray_runner`, trainer-daemon/python/PROTOCOL.md,
 * "Ray runner"): it runs agent commands as Ray tasks on an existing cluster. Connecting to the cluster
 * (`ray.init`) takes seconds, so a training run keeps one driver across its batches (SharedRayDriver);
 * a one-off batch (`lightning dataset run --ray`) starts its own. This side writes `start` / `stop`
 * lines and routes the driver's lines to each agent by id. If the driver dies, every agent still
 * running ends with an error that says so (with its last stderr), and a shared driver is started
 * again for the next batch.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { RayRunnerMessage, type RayExit, type RayPlacement, type RayReady, type RayStart } from '../protocol/rayRunner';
import { LightningError } from '../protocol/errors';
import { withPythonPackages } from '../util/pythonPackage';
import { killGroup } from './processGroup';

/** How the agents reach a Ray cluster (`--ray ADDRESS`, `--ray-python`, `--ray-working-dir`). */
export interface RayOptions {
  /** The cluster: `HOST:6379` (a node of it), `ray://HOST:10001` (Ray Client) or `auto`. */
  readonly address: string;
  /** A Python with `ray` (the cluster's Ray and Python versions). */
  readonly python: string;
  /** A folder Ray ships to every node; the agents run in it. */
  readonly workingDir?: string;
  /** CPUs each agent reserves on its node (default 1). */
  readonly cpusPerAgent?: number;
}

/** One agent running as a Ray task. */
export interface RayAgent {
  /** Where it runs, once its task started. */
  readonly where: RayPlacement | null;
  readonly exited: Promise<RayExit>;
  stop(): void;
}

interface Running {
  where: RayPlacement | null;
  readonly onStarted: (where: RayPlacement) => void;
  readonly onLog: (data: string) => void;
  readonly resolve: (exit: RayExit) => void;
}

const READY_TIMEOUT_MS = 180_000;
const STDERR_TAIL_CHARS = 4_000;

export class RayDriver {
  private readonly running = new Map<string, Running>();
  private nextId = 0;
  private stderrTail = '';
  private gone: string | undefined;

  private constructor(
    private readonly child: ChildProcess,
    readonly ready: RayReady,
  ) {}

  /** Starts the driver and waits until it is connected to the cluster. Its own log goes to `logFile`. */
  static async start(options: RayOptions, logFile: string): Promise<RayDriver> {
    const args = ['-m', 'lightning_trainer.ray_runner', '--address', options.address];
    if (options.workingDir) args.push('--working-dir', path.resolve(options.workingDir));
    if (options.cpusPerAgent !== undefined) args.push('--num-cpus', String(options.cpusPerAgent));
    const env = {
      ...process.env,
      PYTHONPATH: withPythonPackages(),
      PYTHONUNBUFFERED: '1',
    };
    // Its own process group: the terminal's Ctrl-C reaches the runner, which cancels the Ray work itself.
    const child = spawn(options.python, args, { env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    const log = fs.createWriteStream(logFile, { flags: 'a' });
    let tail = '';
    child.stderr.on('data', (chunk: Buffer) => {
      log.write(chunk);
      tail = (tail + chunk.toString('utf8')).slice(-STDERR_TAIL_CHARS);
    });
    const lines = readline.createInterface({ input: child.stdout });
    const ready = await new Promise<RayReady>((resolve, reject) => {
      const fail = (why: string): void => {
        clearTimeout(timer);
        killGroup(child, 'SIGKILL');
        reject(
          new LightningError(
            `the Ray runner (${options.python} -m lightning_trainer.ray_runner) ${why}${tail ? `\n${tail.trimEnd()}` : ''}\nCheck the address (\`ray status --address ${options.address}\`) and that this Python has the cluster's ray version (pip install ray).`,
          ),
        );
      };
      const timer = setTimeout(
        () => fail(`did not connect to ${options.address} in ${READY_TIMEOUT_MS / 1000} s`),
        READY_TIMEOUT_MS,
      );
      child.once('error', (error) => fail(`could not start: ${error.message}`));
      child.once('exit', (code, signal) =>
        setTimeout(() => fail(`exited before it was ready (${signal ?? `code ${code}`})`), 100),
      );
      lines.once('line', (line) => {
        const message = parse(line);
        if (message?.type === 'ready') {
          clearTimeout(timer);
          child.removeAllListeners('exit');
          resolve(message);
        } else
          fail(message?.type === 'fatal' ? message.message : `sent an unexpected first line: ${line.slice(0, 200)}`);
      });
    });
    const driver = new RayDriver(child, ready);
    driver.stderrTail = tail;
    child.stderr.on(
      'data',
      (chunk: Buffer) => (driver.stderrTail = (driver.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_CHARS)),
    );
    lines.on('line', (line) => driver.onLine(line));
    child.once('exit', (code, signal) => driver.onDriverExit(signal ?? `code ${code}`));
    return driver;
  }

  /** Whether the process is still there to run tasks. */
  get alive(): boolean {
    return this.gone === undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Runs one command as a Ray task; `onLog` gets its output as it comes, `onStarted` where it runs. */
  launch(
    spec: Omit<RayStart, 'type' | 'id'>,
    onLog: (data: string) => void,
    onStarted: (where: RayPlacement) => void = () => undefined,
  ): RayAgent {
    const id = `a${this.nextId++}`;
    let resolve!: (exit: RayExit) => void;
    const exited = new Promise<RayExit>((r) => (resolve = r));
    const running: Running = { where: null, onStarted, onLog, resolve };
    if (this.gone !== undefined) resolve(this.goneExit(id));
    else {
      this.running.set(id, running);
      this.send({ type: 'start', id, ...spec });
    }
    return {
      get where() {
        return running.where;
      },
      exited,
      stop: () => {
        if (this.running.has(id)) this.send({ type: 'stop', id });
      },
    };
  }

  /** Cancels whatever still runs and waits (bounded) for the driver to exit. */
  async close(timeoutMs = 30_000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.send({ type: 'shutdown' });
    this.child.stdin!.end();
    const timer = setTimeout(() => killGroup(this.child, 'SIGKILL'), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  /** The runner is exiting at once: the driver's death makes Ray stop its tasks. */
  kill(): void {
    killGroup(this.child, 'SIGKILL');
  }

  private send(message: object): void {
    if (this.gone === undefined && this.child.stdin!.writable) this.child.stdin!.write(`${JSON.stringify(message)}\n`);
  }

  private onLine(line: string): void {
    const message = parse(line);
    if (!message || message.type === 'ready' || message.type === 'fatal' || message.type === 'error') return;
    const running = this.running.get(message.id);
    if (!running) return;
    if (message.type === 'started') {
      running.where = message.where;
      running.onStarted(message.where);
    } else if (message.type === 'log') running.onLog(message.data);
    else {
      this.running.delete(message.id);
      running.resolve({ ...message, where: message.where ?? running.where });
    }
  }

  private goneExit(id: string): RayExit {
    return {
      type: 'exit',
      id,
      code: null,
      signal: null,
      timedOut: false,
      where: null,
      error: `the Ray runner exited (${this.gone})${this.stderrTail ? `: ${this.stderrTail.trim().split('\n').at(-1)}` : ''}`,
    };
  }

  private onDriverExit(why: string): void {
    this.gone = why;
    for (const [id, running] of this.running) running.resolve({ ...this.goneExit(id), where: running.where });
    this.running.clear();
  }
}

function parse(line: string): RayRunnerMessage | undefined {
  try {
    const parsed = RayRunnerMessage.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One driver for many batches (a training run's): started on first use, started again when the one
 * before died (its batch's agents ended with that error), ended by `close`. Each batch still stops
 * only its own tasks on cancel (`stop` lines); the driver stays connected for the next.
 */
export class SharedRayDriver {
  private current: Promise<RayDriver> | undefined;
  private started: RayDriver | undefined;
  private closed = false;

  constructor(
    private readonly options: RayOptions,
    private readonly logFile: string,
  ) {}

  /** The live driver, started (or started again) when there is none; calls are served in order. */
  acquire(): Promise<RayDriver> {
    if (this.closed) return Promise.reject(new LightningError('the Ray driver of this run was closed'));
    const start = async (): Promise<RayDriver> => (this.started = await RayDriver.start(this.options, this.logFile));
    const previous = this.current ?? Promise.reject(new Error('none yet'));
    this.current = previous.then((driver) => (driver.alive ? driver : start()), start);
    return this.current;
  }

  /** Ends the driver (its tasks cancelled); later `acquire` calls fail. */
  async close(timeoutMs?: number): Promise<void> {
    this.closed = true;
    const driver = await this.current?.catch(() => undefined);
    await driver?.close(timeoutMs);
  }

  /** The process is exiting at once: the driver's death makes Ray stop its tasks. */
  kill(): void {
    this.started?.kill();
  }
}
