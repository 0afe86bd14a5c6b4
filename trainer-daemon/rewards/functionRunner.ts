/**
 * The user's own reward function (`export default (trajectory, task) => number | {value, reason}`,
 * sync or async), run in a worker thread with a heap cap (resourceLimits) and a per-call timeout.
 * A module that throws, returns garbage, never answers or allocates without bound costs that one
 * rollout an error; the worker is replaced and the daemon goes on. TypeScript modules are bundled
 * with esbuild first (loaded only then: it is a build tool, not needed for JS modules).
 */
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { z } from 'zod';
import { describeIssues, type ScoringTask, type ScoringTrajectory } from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import type { Disposable } from '../protocol/event';
import type { Verdict } from './rules';

/**
 * The worker: imports the module, says whether that worked (reply 0), then answers one call per
 * message. The per-call timeout starts once the module is loaded, so a slow start (a busy machine,
 * a large module) is not blamed on a rollout.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const describe = (error) => (error instanceof Error ? error.name + ': ' + error.message : 'threw ' + String(error));
import(workerData.url).then((mod) => {
  const fn = typeof mod.default === 'function' ? mod.default : typeof mod.default?.default === 'function' ? mod.default.default : undefined;
  if (!fn) throw new Error('the module has no default export function; write export default (trajectory, task) => number');
  parentPort.on('message', async ({ id, trajectory, task }) => {
    try {
      const value = await fn(trajectory, task);
      parentPort.postMessage({ id, ok: true, value });
    } catch (error) {
      parentPort.postMessage({ id, ok: false, error: describe(error) });
    }
  });
  parentPort.postMessage({ id: 0, ok: true, value: 'loaded' });
}).catch((error) => parentPort.postMessage({ id: 0, ok: false, error: describe(error) }));`;

/** How long a module may take to load (its top-level code) before it is given up. */
const LOAD_TIMEOUT_MS = 15_000;

const FunctionResult = z.union([
  z.number().finite(),
  z.object({ value: z.number().finite(), reason: z.string().max(10_000).nullish() }),
]);

type Reply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

/** A module URL the worker can import: the file itself, or a TS module bundled into a data: URL. */
async function moduleUrl(file: string): Promise<string> {
  if (!fs.existsSync(file)) throw new InvalidInputError(`reward function module ${file} does not exist`);
  if (!/\.(c|m)?tsx?$/.test(file)) return pathToFileURL(file).href;
  let esbuild: typeof import('esbuild');
  try {
    // Loaded on first use only, and optional: the reward's module may be JavaScript.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    esbuild = require('esbuild') as typeof import('esbuild');
  } catch {
    throw new InvalidInputError(
      `reward function ${file} is TypeScript, which needs esbuild: the installed extension carries it for its platform; from a checkout run \`npm ci\` (or \`npm i -D esbuild\`), or give a .js/.mjs module`,
    );
  }
  const built = await esbuild
    .build({
      entryPoints: [file],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      write: false,
      logLevel: 'silent',
    })
    .catch((error: Error) => {
      throw new InvalidInputError(
        `reward function ${file} does not compile: ${error.message.split('\n').slice(0, 3).join(' ')}`,
      );
    });
  return `data:text/javascript;base64,${Buffer.from(built.outputFiles[0]!.text).toString('base64')}`;
}

export class RewardFunctionRunner implements Disposable {
  /** The worker, loading or loaded; forgotten (synchronously, in kill) once it is killed. */
  private worker: Promise<Worker> | undefined;
  private spawned: Worker | undefined;
  private url: Promise<string> | undefined;
  /** Loading the module failed: it would fail the same way for every rollout. */
  private loadError: Error | undefined;
  private next = 0;
  /** Calls run one at a time: a timeout or a crash then blames exactly one rollout. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    readonly file: string,
    private readonly options: { readonly timeoutMs: number; readonly memoryMb: number },
  ) {}

  /** Finds (and for TypeScript, compiles) the module: a missing or broken module fails here, before any scoring. */
  async load(): Promise<void> {
    this.url ??= moduleUrl(this.file);
    await this.url;
  }

  score(trajectory: ScoringTrajectory, task: ScoringTask): Promise<Verdict> {
    const run = this.queue.then(() => this.call(trajectory, task));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async call(trajectory: ScoringTrajectory, task: ScoringTask): Promise<Verdict> {
    if (this.loadError) throw this.loadError;
    await this.load();
    this.worker ??= this.spawn(await this.url!);
    const worker = await this.worker;
    const id = (this.next += 1);
    worker.postMessage({ id, trajectory, task });
    const reply = await this.reply(
      worker,
      id,
      this.options.timeoutMs,
      `the reward function did not answer within ${this.options.timeoutMs} ms`,
    );
    if (!reply.ok) throw new Error(reply.error);
    const parsed = FunctionResult.safeParse(reply.value);
    if (!parsed.success) {
      throw new Error(
        `the reward function returned ${describeValue(reply.value)}; return a finite number or {value: number, reason?: string} (${describeIssues(parsed.error, 'result')})`,
      );
    }
    return typeof parsed.data === 'number'
      ? { kind: 'scored', value: parsed.data, reason: null }
      : { kind: 'scored', value: parsed.data.value, reason: parsed.data.reason ?? null };
  }

  /** Waits for the worker's reply `id`; a timeout, a crash or an exit kills the worker and fails the wait. */
  private reply(worker: Worker, id: number, timeoutMs: number, timeoutMessage: string): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      const fail = (message: string): void => {
        cleanup();
        this.kill(worker);
        reject(new Error(message));
      };
      const timer = setTimeout(() => fail(timeoutMessage), timeoutMs);
      const onMessage = (message: Reply): void => {
        if (message.id !== id) return;
        cleanup();
        resolve(message);
      };
      const onError = (error: Error): void =>
        fail(
          (error as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? `the reward function ran out of memory (cap ${this.options.memoryMb} MB)`
            : `the reward function crashed: ${error.message}`,
        );
      const onExit = (code: number): void => fail(`the reward function's worker exited (code ${code})`);
      const cleanup = (): void => {
        clearTimeout(timer);
        worker.off('message', onMessage).off('error', onError).off('exit', onExit);
      };
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    });
  }

  private async spawn(url: string): Promise<Worker> {
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { url },
      resourceLimits: {
        maxOldGenerationSizeMb: this.options.memoryMb,
        maxYoungGenerationSizeMb: Math.min(32, Math.max(4, this.options.memoryMb / 4)),
      },
      // The daemon's stdout carries its ready line: the module's console output goes nowhere.
      stdout: true,
      stderr: true,
      env: {},
    });
    worker.stdout.resume();
    worker.stderr.resume();
    worker.unref();
    // Errors are reported per call; an error while idle just retires the worker.
    worker.on('error', () => this.kill(worker));
    this.spawned = worker;
    const loaded = await this.reply(
      worker,
      0,
      LOAD_TIMEOUT_MS,
      `the reward function module did not load within ${LOAD_TIMEOUT_MS} ms`,
    ).catch((error: Error) => ({ ok: false as const, id: 0, error: error.message }));
    if (!loaded.ok) {
      this.kill(worker);
      this.loadError = new Error(`cannot load reward function ${this.file}: ${loaded.error}`);
      throw this.loadError;
    }
    return worker;
  }

  private kill(worker: Worker): void {
    if (this.spawned === worker) {
      this.spawned = undefined;
      this.worker = undefined;
    }
    void worker.terminate();
  }

  dispose(): void {
    if (this.spawned) this.kill(this.spawned);
  }
}

function describeValue(value: unknown): string {
  const text = JSON.stringify(value);
  return text === undefined ? String(value) : text.length > 80 ? `${text.slice(0, 80)}…` : text;
}
