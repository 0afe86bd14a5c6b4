/**
 * Following one training run until it ends, for Start Training's progress notification: each change
 * the daemon announces (`trainingRuns/changed`), and the run read again now and on every
 * (re)connection — a daemon restarted after a crash marks the runs it finds running failed before
 * any client connects, so no notification tells of that end. Free of `vscode`, so it is unit-tested.
 */
import type { TrainingRunSummary } from '../../trainer-daemon/protocol';
import type { Disposable, Event } from '../../trainer-daemon/protocol/event';
import type { DaemonClient } from '../daemonClient';

export interface RunEvents {
  /** Every run the daemon says changed. */
  readonly onDidChange: Event<TrainingRunSummary>;
  /** Each connection to a daemon: the first, and every restart's. */
  readonly onDidConnect: Event<unknown>;
}

export interface RunFollowing {
  /** Reads the run from the daemon now. */
  read(): Promise<TrainingRunSummary>;
  /** The run while it is queued or running, at each change. */
  progress(run: TrainingRunSummary): void;
  /** A read that failed (the next connection reads it again). */
  warn(error: unknown): void;
}

/** Resolves with run `runId` once it has ended; its listeners are disposed then. */
export function followRun(runId: string, events: RunEvents, following: RunFollowing): Promise<TrainingRunSummary> {
  return new Promise((resolve) => {
    let ended = false;
    const subscriptions: Disposable[] = [];
    const seen = (run: TrainingRunSummary): void => {
      if (ended || run.id !== runId) return;
      if (run.status === 'running' || run.status === 'queued') {
        following.progress(run);
        return;
      }
      ended = true;
      for (const subscription of subscriptions) subscription.dispose();
      resolve(run);
    };
    const read = (): void => void following.read().then(seen, (error: unknown) => following.warn(error));
    subscriptions.push(events.onDidChange(seen), events.onDidConnect(read));
    // The run may have ended before the listener was attached (a fast failure).
    read();
  });
}

/** The daemon a run is followed in: its connection (started if need be) and its (re)connections. */
export interface RunDaemon {
  ensureRunning(): Promise<Pick<DaemonClient, 'request'>>;
  readonly onDidConnect: Event<unknown>;
}

/**
 * followRun in a daemon, for Start Training's and Optimize This Prompt's notifications: each read is the run's
 * summary (`getTrainingRun` past its last metric point).
 */
export function followDaemonRun(
  runId: string,
  daemon: RunDaemon,
  onDidChange: Event<TrainingRunSummary>,
  following: Omit<RunFollowing, 'read'>,
): Promise<TrainingRunSummary> {
  const read = async (): Promise<TrainingRunSummary> => {
    const client = await daemon.ensureRunning();
    return (await client.request('getTrainingRun', { id: runId, afterStep: Number.MAX_SAFE_INTEGER })).run;
  };
  return followRun(runId, { onDidChange, onDidConnect: daemon.onDidConnect }, { ...following, read });
}
