/**
 * Starts and supervises the Python trainer worker (protocol v1 over stdio, trainer-daemon/python/PROTOCOL.md):
 * requests are correlated with their responses by id, every line is checked against the protocol's
 * schemas, stderr goes to the daemon's log, and a crash (exit, a line that is not the protocol) fails
 * the pending requests with the Python traceback — it never takes the daemon down.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import {
  WORKER_PROTOCOL_VERSION,
  WorkerMessage,
  WorkerMethods,
  WorkerReady,
  WorkerResponse,
  describeIssues,
  type WorkerErrorKind,
  type WorkerEvent,
  type WorkerMethodName,
  type WorkerParamsOf,
  type WorkerResultOf,
} from '../protocol';
import { InvalidInputError, LightningError, TrainerUnavailableError } from '../protocol/errors';
import type { Logger } from '../log';
import { Emitter, type Disposable, type Event } from '../protocol/event';
import { freeLoopbackPort, torchrunArgs, torchrunFailures, type DistributedSpec } from './torchrun';
import { withPythonPackages } from '../util/pythonPackage';

/** The worker answered a request with an error, or died while it was pending. */
export class WorkerError extends LightningError {
  constructor(
    message: string,
    readonly kind: WorkerErrorKind | 'crashed',
    readonly traceback?: string,
  ) {
    super(traceback ? `${message}\n${traceback.trimEnd()}` : message);
  }
}

export interface WorkerOptions {
  readonly python: string;
  readonly logger: Logger;
  readonly env?: NodeJS.ProcessEnv;
  /** How long the worker may take to print its ready line (importing torch is slow on a cold disk). */
  readonly readyTimeoutMs?: number;
  /** Run it under torchrun (training/torchrun.ts): rank 0 speaks the protocol, every rank trains. */
  readonly distributed?: DistributedSpec | null;
}

interface Pending {
  readonly method: WorkerMethodName;
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/** A traceback of a worker whose Python cannot import torch. */
const MISSING_TORCH = /No module named ['"]?torch['"]?(\s|$)/;

/** How much of the worker's stderr is kept to explain a crash. */
const STDERR_TAIL_CHARS = 8_000;

export class TrainerWorker implements Disposable {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private stderrTail = '';
  private failure: WorkerError | undefined;
  private readonly _onDidEvent = new Emitter<WorkerEvent>();
  private readonly _onDidExit = new Emitter<WorkerError>();
  /** Progress and log events the worker sends while it works. */
  readonly onDidEvent: Event<WorkerEvent> = this._onDidEvent.event;
  /** The worker went away when nobody asked it to (after `dispose`, nothing fires). */
  readonly onDidExit: Event<WorkerError> = this._onDidExit.event;
  readonly exited: Promise<void>;
  private disposed = false;
  /** `shutdown` was asked: the worker's own exit is no crash. */
  private stopping = false;

  private constructor(
    private readonly child: ChildProcess,
    readonly ready: WorkerReady,
    private readonly lines: readline.Interface,
    private readonly logger: Logger,
    exited: Promise<void>,
  ) {
    this.exited = exited;
  }

  /** Spawns the worker and waits for its ready line. */
  static async start(options: WorkerOptions): Promise<TrainerWorker> {
    const env = {
      ...process.env,
      ...options.env,
      PYTHONPATH: withPythonPackages(),
      PYTHONUNBUFFERED: '1',
    };
    const args = options.distributed
      ? torchrunArgs(options.distributed, await freeLoopbackPort())
      : ['-m', 'lightning_trainer.worker'];
    const child = spawn(options.python, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    const logger = options.logger;
    let stderr = '';
    const stderrLines = readline.createInterface({ input: child.stderr });
    stderrLines.on('line', (line) => {
      stderr = (stderr + line + '\n').slice(-STDERR_TAIL_CHARS);
      logger.info('worker stderr', { line });
    });
    const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
    const lines = readline.createInterface({ input: child.stdout });
    const ready = await new Promise<WorkerReady>((resolve, reject) => {
      const fail = (why: string): void => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        // Let the last stderr lines (the traceback) arrive before reporting them.
        void exited.then(() => {
          const message = `the trainer worker (${options.python}) ${why}`;
          // Python's own words for a missing PyTorch, read here where the worker's output arrives: the error's kind
          // says it to every client.
          reject(
            MISSING_TORCH.test(stderr)
              ? new TrainerUnavailableError(
                  `${message}: its Python has no PyTorch (run \`lightning doctor --setup\`)\n${stderr.trimEnd()}`,
                )
              : new WorkerError(message, 'crashed', stderr || undefined),
          );
        });
      };
      const timer = setTimeout(
        () => fail(`printed no ready line in ${(options.readyTimeoutMs ?? 120_000) / 1000} s`),
        options.readyTimeoutMs ?? 120_000,
      );
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(
          new TrainerUnavailableError(
            `cannot start the trainer worker with ${options.python}: ${error.message} (run \`lightning doctor\`)`,
          ),
        );
      });
      child.once('exit', (code, signal) => fail(`exited before it was ready (${signal ?? `code ${code}`})`));
      lines.once('line', (line) => {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        const parsed = parseLine(line, WorkerReady);
        if (parsed instanceof Error) return fail(`sent a bad ready line: ${parsed.message}`);
        if (parsed.protocol !== WORKER_PROTOCOL_VERSION)
          return fail(`speaks protocol ${parsed.protocol}, this daemon ${WORKER_PROTOCOL_VERSION}`);
        resolve(parsed);
      });
    });
    const worker = new TrainerWorker(child, ready, lines, logger, exited);
    worker.stderrTail = stderr;
    stderrLines.on('line', (line) => (worker.stderrTail = (worker.stderrTail + line + '\n').slice(-STDERR_TAIL_CHARS)));
    worker.listen();
    logger.info('trainer worker ready', {
      pid: child.pid,
      python: ready.python,
      torch: ready.torch,
      device: ready.device,
      ...(ready.distributed ? { ranks: ready.distributed.ranks } : {}),
    });
    return worker;
  }

  /** Why the worker can no longer answer (it crashed or was stopped); undefined while it runs. */
  get failed(): WorkerError | undefined {
    return this.failure;
  }

  /**
   * The worker's failure, waiting up to `graceMs` for it to be noticed: a worker that is dying (e.g. torchrun
   * tearing its ranks down after one was killed) breaks its policy server before its process has exited, so
   * callers seeing only the symptoms (rollouts with no answer) ask here before blaming anything else.
   */
  async failureWithin(graceMs: number): Promise<WorkerError | undefined> {
    if (!this.failure)
      await Promise.race([this.exited, new Promise((resolve) => setTimeout(resolve, graceMs).unref())]);
    return this.failure;
  }

  /** Sends one request; resolves with its schema-checked result or rejects with a WorkerError. */
  request<M extends WorkerMethodName>(method: M, params: WorkerParamsOf<M>): Promise<WorkerResultOf<M>> {
    if (this.failure) return Promise.reject(this.failure);
    const checked = WorkerMethods[method].params.safeParse(params);
    if (!checked.success) return Promise.reject(new InvalidInputError(describeIssues(checked.error, method)));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { method, resolve: resolve, reject });
      this.child.stdin!.write(`${JSON.stringify({ type: 'request', id, method, params })}\n`);
    });
  }

  /** Asks the worker to exit, then makes sure it has (SIGKILL after `graceMs`). */
  async shutdown(graceMs = 5_000): Promise<void> {
    if (!this.failure && !this.disposed) {
      this.stopping = true;
      const grace = (): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, graceMs).unref());
      const asked = this.request('shutdown', {}).catch(() => undefined);
      await Promise.race([asked, grace()]);
      // Having answered, it exits by itself: under torchrun once rank 0 has told the other ranks to stop, which a
      // SIGTERM now would cut short (another machine's ranks would then fail with "connection closed by peer").
      await Promise.race([this.exited, grace()]);
    }
    this.dispose();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    timer.unref();
    await this.exited;
    clearTimeout(timer);
  }

  /** Stops the worker now (SIGTERM); pending requests fail. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.fail(new WorkerError('the trainer worker was stopped', 'crashed'));
    this._onDidEvent.dispose();
    this._onDidExit.dispose();
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
    this.child.stdin?.destroy();
  }

  private listen(): void {
    this.lines.on('line', (line) => {
      const parsed = parseLine(line, WorkerMessage);
      if (parsed instanceof Error) {
        this.crash(`wrote a line that is not the worker protocol (${parsed.message}): ${line.slice(0, 200)}`);
        this.child.kill('SIGKILL');
        return;
      }
      if (parsed.type === 'event') {
        this._onDidEvent.fire(parsed);
        return;
      }
      this.settle(parsed, line);
    });
    this.child.once('exit', (code, signal) => {
      if (this.disposed || this.stopping) return;
      // stderr may still hold the traceback: wait for the pipe to close before reporting.
      void this.exited.then(() => this.crash(`exited unexpectedly (${signal ?? `code ${code}`})`));
    });
    this.child.stdin!.on('error', () => undefined);
  }

  private settle(message: { id: number | null }, line: string): void {
    const pending = message.id === null ? undefined : this.pending.get(message.id);
    if (message.id === null || !pending) {
      this.logger.error(
        message.id === null
          ? 'trainer worker could not read a request line'
          : 'trainer worker answered an unknown request',
        { response: line.slice(0, 500) },
      );
      return;
    }
    this.pending.delete(message.id);
    const response = parseLine(line, WorkerResponse);
    if (response instanceof Error)
      return pending.reject(
        new WorkerError(`the trainer worker sent a bad ${pending.method} response: ${response.message}`, 'crashed'),
      );
    if ('error' in response) {
      pending.reject(
        new WorkerError(
          `the trainer worker's ${pending.method} failed (${response.error.kind}): ${response.error.message}`,
          response.error.kind,
          response.error.traceback,
        ),
      );
      return;
    }
    const result = WorkerMethods[pending.method].result.safeParse(response.result);
    if (!result.success)
      return pending.reject(
        new WorkerError(
          `the trainer worker sent an invalid ${pending.method} result: ${describeIssues(result.error, 'result')}`,
          'crashed',
        ),
      );
    pending.resolve(result.data);
  }

  private crash(why: string): void {
    if (this.failure) return;
    const ranks = this.ready.distributed ? torchrunFailures(this.stderrTail) : null;
    const error = new WorkerError(
      `the trainer worker ${why}${ranks ? `: ${ranks}` : ''}`,
      'crashed',
      this.stderrTail.trim() || undefined,
    );
    this.logger.error('trainer worker crashed', { why, pid: this.child.pid });
    this.fail(error);
    this._onDidExit.fire(error);
  }

  private fail(error: WorkerError): void {
    this.failure ??= error;
    for (const pending of this.pending.values()) pending.reject(error);
    this.pending.clear();
  }
}

function parseLine<T>(
  line: string,
  schema: { safeParse(value: unknown): { success: true; data: T } | { success: false; error: import('zod').ZodError } },
): T | Error {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    return new Error('not JSON');
  }
  const parsed = schema.safeParse(json);
  return parsed.success ? parsed.data : new Error(describeIssues(parsed.error, 'line'));
}
