/**
 * Process mode of the batch runner: each attempt runs the agent command once, with the
 * instrumentation environment, in its own process group and with its own log file, through a
 * bounded pool of `concurrency` slots. A failed or timed-out attempt's error carries the log's end
 * (protocol/failure.ts: the exception, the last lines).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';
import path from 'node:path';
import { instrumentationEnv, type RolloutStatus } from '../protocol';
import { capturePreloads } from '../capture/preloadFile';
import { canRetry } from '../protocol/status';
import { errorMessage, LightningError } from '../protocol/errors';
import { envSecrets, failureText } from '../protocol/failure';
import { isSecretVariable } from '../protocol/secrets';
import type { BatchMode, BatchPool, BatchRunnerOptions } from './pool';
import { killGroup, stopGroup } from './processGroup';

export class ProcessPool implements BatchPool {
  private readonly queue: string[] = [];
  private readonly running = new Map<string, ChildProcess>();
  private cancelled = false;
  /** Rollouts whose agent could not be started at all (no retry: it would fail the same way). */
  private readonly unstartable = new Set<string>();

  constructor(
    private readonly options: BatchRunnerOptions,
    private readonly mode: Extract<BatchMode, { kind: 'process' }>,
  ) {}

  async run(rolloutIds: readonly string[]): Promise<void> {
    // A command that cannot be found fails before any rollout starts: every attempt would fail the same way.
    const [program] = this.mode.command;
    const missing = unrunnable(program!, this.mode.cwd ?? process.cwd(), this.options.env.PATH);
    if (missing !== undefined)
      throw new LightningError(
        `the agent command could not start (cannot run ${program}: ${missing}); check the command after --`,
      );
    this.queue.push(...rolloutIds);
    let failure: { error: unknown } | undefined;
    const slot = async (): Promise<void> => {
      while (!this.cancelled && this.queue.length > 0) {
        try {
          await this.attempt(this.queue.shift()!);
        } catch (error) {
          // The daemon refused or went away: stop every agent rather than leave them unsupervised.
          failure ??= { error };
          this.cancel();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, this.mode.concurrency) }, slot));
    if (failure) throw failure.error;
    if (this.cancelled) {
      for (const id of this.queue.splice(0)) {
        await this.options.client
          .request('transitionRollout', { id, to: 'cancelled', error: 'the batch was cancelled' })
          .catch(() => undefined);
      }
    }
  }

  killAll(): void {
    for (const child of this.running.values()) killGroup(child, 'SIGKILL');
  }

  cancel(): void {
    this.cancelled = true;
    for (const child of this.running.values()) stopGroup(child, this.options.killGraceMs);
  }

  get wasCancelled(): boolean {
    return this.cancelled;
  }

  private async attempt(rolloutId: string): Promise<void> {
    const started = Date.now();
    const { rollout, url } = await this.options.client.request('startAgentRun', {
      rolloutId,
      upstream: this.options.upstream,
      providerUpstreams: this.options.providerUpstreams,
      tokenIds: this.options.tokenIds,
    });
    if (this.cancelled) {
      // Cancelled while the attempt was being set up: do not start an agent nobody will wait for.
      await this.options.client.request('transitionRollout', {
        id: rolloutId,
        to: 'cancelled',
        error: 'the batch was cancelled',
      });
      return;
    }
    const [program, ...args] = this.mode.command;
    const env = {
      ...this.options.env,
      ...instrumentationEnv({
        url,
        rolloutId,
        task: rollout.task?.input ?? null,
        base: this.options.env,
        ...capturePreloads(),
      }),
    };
    const logFile = path.join(this.options.logDir, `${rolloutId}.${rollout.attemptCount}.log`);
    const log = fs.openSync(logFile, 'a', PRIVATE_FILE_MODE);
    const outcome = await new Promise<{ to: RolloutStatus; error: string | null; exitCode: number | null }>(
      (resolve) => {
        const child = spawn(program!, args, { env, cwd: this.mode.cwd, detached: true, stdio: ['ignore', log, log] });
        this.running.set(rolloutId, child);
        if (child.pid !== undefined) this.options.onSpawn?.(child.pid);
        let timedOut = false;
        const timer = setTimeout(() => {
          timedOut = true;
          stopGroup(child, this.options.killGraceMs);
        }, this.options.timeoutMs);
        child.once('error', (error) => {
          clearTimeout(timer);
          this.unstartable.add(rolloutId);
          resolve({ to: 'failed', error: `cannot run ${program}: ${errorMessage(error)}`, exitCode: null });
        });
        child.once('exit', (code, signal) => {
          clearTimeout(timer);
          // The group may still hold the agent's own children: stop them with it.
          killGroup(child, 'SIGKILL');
          if (this.cancelled) resolve({ to: 'cancelled', error: 'the batch was cancelled', exitCode: code });
          else if (timedOut)
            resolve({ to: 'timeout', error: `timed out after ${this.options.timeoutMs / 1000} s`, exitCode: code });
          else if (code === 0) resolve({ to: 'succeeded', error: null, exitCode: 0 });
          else
            resolve({
              to: 'failed',
              error: signal ? `killed by ${signal}` : `exited with code ${code}`,
              exitCode: code,
            });
        });
      },
    );
    this.running.delete(rolloutId);
    fs.closeSync(log);
    if ((outcome.to === 'failed' && !this.unstartable.has(rolloutId)) || outcome.to === 'timeout')
      outcome.error = failureText(outcome.error ?? outcome.to, logTail(logFile), envSecrets(env, isSecretVariable));
    const finished = await this.options.client.request('transitionRollout', { id: rolloutId, ...outcome });
    const retrying = !this.cancelled && !this.unstartable.has(rolloutId) && canRetry(finished);
    this.options.onAttempt({ rollout: finished, durationMs: Date.now() - started, retrying });
    // A command that cannot start (past the check in `run`) fails every rollout the same way: the batch stops (a
    // non-zero exit, what is queued left queued), as in worker mode, instead of failing each in turn.
    if (this.unstartable.has(rolloutId) && !this.cancelled)
      throw new LightningError(`the agent command could not start (${outcome.error}); check the command after --`);
    if (retrying) {
      await this.options.client.request('transitionRollout', { id: rolloutId, to: 'queued' });
      this.queue.push(rolloutId);
    }
  }
}

/**
 * Why `program` cannot be run from `cwd` with this PATH (not found, not executable), or undefined when it can, or when
 * that cannot be told here (Windows resolves commands its own way; the spawn itself then says). The spawn's own error
 * stays the backstop (a file that is executable but cannot run).
 */
export function unrunnable(program: string, cwd: string, PATH: string | undefined): string | undefined {
  if (process.platform === 'win32') return undefined;
  const executable = (file: string): boolean => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (program.includes('/')) {
    const file = path.resolve(cwd, program);
    if (executable(file)) return undefined;
    return fs.existsSync(file) ? 'not an executable file' : 'no such file';
  }
  // As the spawn searches: without a PATH, its default; an empty entry is the working directory, a relative one is
  // relative to it.
  if (PATH === undefined) return undefined;
  const dirs = PATH.split(path.delimiter);
  return dirs.some((dir) => executable(path.resolve(cwd, dir || '.', program))) ? undefined : 'not found on PATH';
}

/** The end of an attempt's log (what failureText needs), '' when it cannot be read. */
function logTail(file: string, bytes = 16 * 1024): string {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'r');
    const size = fs.fstatSync(fd).size;
    const buffer = Buffer.alloc(Math.min(bytes, size));
    fs.readSync(fd, buffer, 0, buffer.length, size - buffer.length);
    return buffer.toString('utf8');
  } catch {
    return '';
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}
