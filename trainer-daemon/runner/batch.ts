/**
 * The batch runner: runs queued rollouts as agent processes through a bounded worker pool. Each
 * attempt gets the instrumentation environment, its own process group (so a timeout or a cancel
 * stops the agent's children too) and a log file; failed and timed-out attempts are retried while
 * the rollout has attempts left; a cancel stops the running agents and marks what is left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { instrumentationEnv, type Rollout, type RolloutStatus } from '../protocol';
import { errorMessage } from '../errors';
import type { RpcClient } from '../rpc/client';

export interface AttemptEvent {
  readonly rollout: Rollout;
  readonly durationMs: number;
  /** The attempt will run again (failed or timed out with attempts left). */
  readonly retrying: boolean;
}

export interface BatchRunnerOptions {
  readonly client: RpcClient;
  readonly argv: readonly string[];
  readonly concurrency: number;
  readonly timeoutMs: number;
  readonly upstream: string | null;
  readonly tokenIds: boolean;
  /** Each attempt's stdout and stderr go to `<logDir>/<rollout>.<attempt>.log`. */
  readonly logDir: string;
  readonly env: NodeJS.ProcessEnv;
  readonly onAttempt: (event: AttemptEvent) => void;
  /** How long a stopped agent gets between SIGTERM and SIGKILL. */
  readonly killGraceMs?: number;
}

/** Signals a whole process group (the agent and whatever it started), even after the agent itself exited. */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // The group is gone.
  }
}

export class BatchRunner {
  private readonly queue: string[] = [];
  private readonly running = new Map<string, ChildProcess>();
  private cancelled = false;
  /** Rollouts whose agent could not be started at all (no retry: it would fail the same way). */
  private readonly unstartable = new Set<string>();

  constructor(private readonly options: BatchRunnerOptions) {
    fs.mkdirSync(options.logDir, { recursive: true });
  }

  /** Runs the given queued rollouts to a final status; resolves when none is queued or running. */
  async run(rolloutIds: readonly string[]): Promise<void> {
    this.queue.push(...rolloutIds);
    let failure: unknown;
    const worker = async (): Promise<void> => {
      while (!this.cancelled && this.queue.length > 0) {
        try {
          await this.attempt(this.queue.shift()!);
        } catch (error) {
          // The daemon refused or went away: stop every agent rather than leave them unsupervised.
          failure ??= error;
          this.cancel();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, this.options.concurrency) }, worker));
    if (failure) throw failure;
    if (this.cancelled) {
      for (const id of this.queue.splice(0)) {
        await this.options.client.request('transitionRollout', { id, to: 'cancelled', error: 'the batch was cancelled' }).catch(() => undefined);
      }
    }
  }

  /** Kills every running agent's process group at once (the runner is exiting). */
  killAll(): void {
    for (const child of this.running.values()) killGroup(child, 'SIGKILL');
  }

  /** Stops launching, stops the running agents (their rollouts become cancelled), cancels the rest. */
  cancel(): void {
    this.cancelled = true;
    for (const child of this.running.values()) {
      killGroup(child, 'SIGTERM');
      setTimeout(() => killGroup(child, 'SIGKILL'), this.options.killGraceMs ?? 2_000).unref();
    }
  }

  get wasCancelled(): boolean {
    return this.cancelled;
  }

  private async attempt(rolloutId: string): Promise<void> {
    const started = Date.now();
    const { rollout, url } = await this.options.client.request('startAgentRun', { rolloutId, upstream: this.options.upstream, tokenIds: this.options.tokenIds });
    if (this.cancelled) {
      // Cancelled while the attempt was being set up: do not start an agent nobody will wait for.
      await this.options.client.request('transitionRollout', { id: rolloutId, to: 'cancelled', error: 'the batch was cancelled' });
      return;
    }
    const env = { ...this.options.env, ...instrumentationEnv({ url, rolloutId, task: rollout.task?.input ?? null, base: this.options.env }) };
    const log = fs.openSync(path.join(this.options.logDir, `${rolloutId}.${rollout.attemptCount}.log`), 'a');
    const outcome = await new Promise<{ to: RolloutStatus; error: string | null; exitCode: number | null }>((resolve) => {
      const child = spawn(this.options.argv[0]!, this.options.argv.slice(1), { env, detached: true, stdio: ['ignore', log, log] });
      this.running.set(rolloutId, child);
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup(child, 'SIGTERM');
        setTimeout(() => killGroup(child, 'SIGKILL'), this.options.killGraceMs ?? 2_000).unref();
      }, this.options.timeoutMs);
      child.once('error', (error) => {
        clearTimeout(timer);
        this.unstartable.add(rolloutId);
        resolve({ to: 'failed', error: `cannot run ${this.options.argv[0]}: ${errorMessage(error)}`, exitCode: null });
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        // The group may still hold the agent's own children: stop them with it.
        killGroup(child, 'SIGKILL');
        if (this.cancelled) resolve({ to: 'cancelled', error: 'the batch was cancelled', exitCode: code });
        else if (timedOut) resolve({ to: 'timeout', error: `timed out after ${this.options.timeoutMs / 1000} s`, exitCode: code });
        else if (code === 0) resolve({ to: 'succeeded', error: null, exitCode: 0 });
        else resolve({ to: 'failed', error: signal ? `killed by ${signal}` : `exited with code ${code}`, exitCode: code });
      });
    });
    this.running.delete(rolloutId);
    fs.closeSync(log);
    let finished = await this.options.client.request('transitionRollout', { id: rolloutId, ...outcome });
    const retrying = !this.cancelled && !this.unstartable.has(rolloutId) && (finished.status === 'failed' || finished.status === 'timeout') && finished.attemptCount < finished.maxAttempts;
    this.options.onAttempt({ rollout: finished, durationMs: Date.now() - started, retrying });
    if (retrying) {
      finished = await this.options.client.request('transitionRollout', { id: rolloutId, to: 'queued' });
      this.queue.push(rolloutId);
    }
  }
}
