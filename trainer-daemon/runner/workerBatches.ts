/**
 * Worker-mode batches, daemon side (docs/datasets.md, "Worker mode"): the queue long-lived agent
 * workers pull rollouts from. The queue lives in the daemon so that `POST …/next` and
 * `POST {url}/finish` are one local write each, with no round trip to the runner: the runner only
 * supervises the worker processes and follows the attempts through `workerBatches/events`.
 *
 * Per attempt: `next` starts the rollout (running, a fresh capability key) and arms its timeout;
 * `finish`, the timeout or the death of its worker ends it (the key is revoked with it), and a
 * failed or timed-out rollout with attempts left goes back to the queue. A runner in another process
 * follows the attempts through `workerBatches/events` (a long poll); one inside the daemon (its training
 * loops) subscribes with `follow` and never polls its own daemon. A batch whose remote runner stops
 * polling for `LEASE_MS` ends: workers of a runner that died get 204 and stop, the attempts they were running fail, and
 * what is still queued stays queued, for `dataset run --resume` (as a dead runner's batch in process mode).
 */
import crypto from 'node:crypto';
import type { z } from 'zod';
import type { RayNode, Rollout } from '../protocol';
import { canRetry } from '../protocol/status';
import type { AttemptEnded, OpenWorkerBatchParams, WorkerAssignment, WorkerBatchEvents } from '../protocol/runner';
import { ConflictError, InvalidInputError, NotFoundError, errorMessage } from '../protocol/errors';
import type { Logger } from '../log';
import type { Store } from '../store/store';
import type { WriteQueue } from '../store/writeQueue';
import type { BatchFollower, BatchListener } from './pool';

type OpenParams = z.output<typeof OpenWorkerBatchParams>;
type Ending = 'succeeded' | 'failed' | 'timeout' | 'cancelled';

const LEASE_MS = 60_000;
/**
 * Attempts per worker remembered until its runner says where it runs (a worker that ends rollouts first is fast; local
 * ones are never placed).
 */
const MAX_UNPLACED = 64;

/** An in-process runner following a batch (`WorkerBatches.follow`). */
interface Follower {
  readonly listener: BatchListener;
  /** Called at every change of the batch (after `wake`). */
  readonly changed: () => void;
  readonly fail: (error: unknown) => void;
}

interface Flight {
  readonly worker: string;
  readonly startedAt: number;
  timer?: NodeJS.Timeout;
}

export interface WorkerBatchesOptions {
  readonly store: Store;
  readonly writes: WriteQueue;
  readonly logger: Logger;
  /** The daemon's base URL (known once it listens). */
  readonly baseUrl: () => string;
  /** How long a remote runner may go without polling before its batch ends (default LEASE_MS; tests shorten it). */
  readonly leaseMs?: number;
}

/** One batch: its queue, the attempts in flight (by rollout) and the attempt events for the runner. */
class WorkerBatchState {
  readonly queue: string[];
  readonly inFlight = new Map<string, Flight>();
  /** Attempts between their end and their (re)queueing: the batch is not done while any is. */
  settling = 0;
  cancelled = false;
  readonly events: AttemptEnded[] = [];
  /** Index of `events[0]` in the whole sequence (delivered events are dropped). */
  eventBase = 0;
  lastPoll = Date.now();
  /** In-process runners (`follow`): told of each attempt as it ends, instead of its being buffered in `events`. */
  readonly followers = new Set<Follower>();
  /** Where each worker runs, when its runner said (`workerPlaced`: a Ray node); the attempts it ends record it. */
  readonly nodes = new Map<string, RayNode>();
  /** Workers' `/next` calls waiting for a rollout now, by worker: such a worker is alive (not stuck). */
  readonly waiting = new Map<string, number>();
  /** Workers found stuck after a timeout (`restartWorker`): their `/next` gets 204, so they take nothing more. */
  readonly retired = new Set<string>();
  /** Attempts a worker ended before its runner said where it runs (its first few, by rollout and attempt number). */
  readonly endedUnplaced = new Map<string, Array<[string, number]>>();
  private wakers: Array<() => void> = [];

  constructor(
    readonly id: string,
    readonly key: string,
    readonly params: OpenParams,
  ) {
    this.queue = [...params.rolloutIds];
  }

  get done(): boolean {
    return this.cancelled || this.queue.length + this.inFlight.size + this.settling === 0;
  }

  /** Resolves at the next change (a rollout queued, an attempt ended, the batch done) or after `ms`. */
  changed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.wakers = this.wakers.filter((w) => w !== wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakers.push(wake);
    });
  }

  wake(): void {
    for (const wake of this.wakers.splice(0)) wake();
    for (const follower of [...this.followers]) follower.changed();
  }

  /** An attempt ended: to the in-process followers, else buffered for `workerBatches/events`. */
  ended(event: AttemptEnded): void {
    if (this.followers.size === 0) this.events.push(event);
    for (const follower of this.followers) {
      // A listener that throws ends its own follow (as a failed poll would), not the attempt's commit.
      try {
        follower.listener.onAttempt(event);
      } catch (error) {
        follower.fail(error);
      }
    }
  }
}

export class WorkerBatches implements BatchFollower {
  private readonly batches = new Map<string, WorkerBatchState>();
  private readonly byKey = new Map<string, WorkerBatchState>();
  private readonly byRollout = new Map<string, WorkerBatchState>();
  private readonly sweeper: NodeJS.Timeout;
  private disposed = false;

  private readonly leaseMs: number;

  constructor(private readonly options: WorkerBatchesOptions) {
    this.leaseMs = options.leaseMs ?? LEASE_MS;
    this.sweeper = setInterval(() => this.sweep(), Math.min(5_000, this.leaseMs));
    this.sweeper.unref();
  }

  /** Opens a batch over queued rollouts; an unknown, repeated or not queued rollout refuses the whole batch. */
  open(params: OpenParams): { id: string; url: string } {
    const seen = new Set<string>();
    for (const rolloutId of params.rolloutIds) {
      if (seen.has(rolloutId)) throw new InvalidInputError(`params.rolloutIds: rollout ${rolloutId} is listed twice`);
      seen.add(rolloutId);
      const { status } = this.options.store.getRollout(rolloutId);
      if (status !== 'queued')
        throw new InvalidInputError(`params.rolloutIds: rollout ${rolloutId} is ${status}, not queued`);
    }
    // A rollout another open batch still holds (its runner died, and `dataset run --resume` queued it again within the
    // minute before that batch ends) is this batch's now: the old one neither times it out nor ends it.
    for (const rolloutId of params.rolloutIds) this.takeOver(rolloutId);
    const id = `wb-${crypto.randomBytes(8).toString('hex')}`;
    const key = crypto.randomBytes(24).toString('base64url');
    const batch = new WorkerBatchState(id, key, params);
    this.batches.set(id, batch);
    this.byKey.set(key, batch);
    return { id, url: `${this.options.baseUrl()}/b/${key}` };
  }

  /** The attempts that ended after `after`, waiting up to `waitMs` for one. */
  async events(id: string, after: number, waitMs: number): Promise<WorkerBatchEvents> {
    const batch = this.get(id);
    batch.lastPoll = Date.now();
    if (batch.eventBase + batch.events.length <= after && !batch.done) await batch.changed(waitMs);
    batch.lastPoll = Date.now();
    // What the runner has seen is not needed again.
    const seen = Math.min(Math.max(0, after - batch.eventBase), batch.events.length);
    batch.events.splice(0, seen);
    batch.eventBase += seen;
    const events = batch.events.slice(Math.max(0, after - batch.eventBase));
    return { events, next: batch.eventBase + batch.events.length, done: batch.done, cancelled: batch.cancelled };
  }

  /**
   * Follows a batch in process (the daemon's own training loops): each attempt as it ends and a cancel
   * by someone else, pushed, with no polling; resolves once the batch is done, rejects if the daemon stops
   * first. While followed, a batch is not swept: its runner lives in this process.
   */
  follow(id: string, listener: BatchListener): Promise<void> {
    const batch = this.get(id);
    return new Promise((resolve, reject) => {
      let toldCancelled = false;
      const follower: Follower = {
        listener,
        changed: () => {
          try {
            if (batch.cancelled && !toldCancelled) {
              toldCancelled = true;
              listener.onCancelled();
            }
          } catch (error) {
            follower.fail(error);
            return;
          }
          if (batch.done) {
            batch.followers.delete(follower);
            resolve();
          } else if (this.disposed) follower.fail(new ConflictError('the daemon is stopping: its worker batches end'));
        },
        fail: (error) => {
          batch.followers.delete(follower);
          reject(error);
        },
      };
      // Ended before the runner subscribed (none when it follows right after opening): delivered first.
      const pending = batch.events.splice(0);
      batch.eventBase += pending.length;
      for (const event of pending) listener.onAttempt(event);
      batch.followers.add(follower);
      follower.changed();
    });
  }

  /**
   * `POST <runner url>/<worker>/next`: the next queued rollout, started; null (204) once the batch
   * is done. With nothing queued but attempts still in flight (they may be retried), waits.
   */
  knows(key: string): boolean {
    return this.byKey.has(key);
  }

  async next(key: string, worker: string, isOpen: () => boolean): Promise<WorkerAssignment | null> {
    const batch = this.byKey.get(key);
    if (!batch) throw new NotFoundError('unknown runner key: this URL belongs to no open batch of this daemon');
    for (;;) {
      if (this.disposed || batch.done || !isOpen() || batch.retired.has(worker)) return null;
      const rolloutId = batch.queue.shift();
      if (rolloutId === undefined) {
        batch.waiting.set(worker, (batch.waiting.get(worker) ?? 0) + 1);
        try {
          await batch.changed(30_000);
        } finally {
          batch.waiting.set(worker, batch.waiting.get(worker)! - 1);
        }
        continue;
      }
      let held = 0;
      for (const flight of batch.inFlight.values()) if (flight.worker === worker) held += 1;
      if (held >= batch.params.concurrencyPerWorker) {
        batch.queue.unshift(rolloutId);
        throw new ConflictError(
          `worker ${worker} already holds ${held} rollouts, its limit (LIGHTNING_RUNNER_CONCURRENCY); finish one first`,
        );
      }
      const assignment = await this.start(batch, rolloutId, worker);
      if (assignment) return assignment;
    }
  }

  /** Starts the rollout for the worker; undefined when it could not start or the batch was cancelled meanwhile. */
  private async start(
    batch: WorkerBatchState,
    rolloutId: string,
    worker: string,
  ): Promise<WorkerAssignment | undefined> {
    const flight: Flight = { worker, startedAt: Date.now() };
    batch.inFlight.set(rolloutId, flight);
    this.byRollout.set(rolloutId, batch);
    let started: { rollout: Rollout; key: string };
    try {
      started = await this.options.writes.submit(() =>
        this.options.store.startAgentRun(rolloutId, {
          upstream: batch.params.upstream,
          tokenIds: batch.params.tokenIds,
          providerUpstreams: batch.params.providerUpstreams,
        }),
      );
    } catch (error) {
      // Not startable (moved on by someone else since): not this batch's to run any more.
      this.options.logger.warn('a worker batch rollout could not start', { rolloutId, error: errorMessage(error) });
      this.forget(batch, rolloutId);
      batch.wake();
      return undefined;
    }
    // Cancelled while starting: the cancel already ended it.
    if (batch.inFlight.get(rolloutId) !== flight) return undefined;
    flight.timer = setTimeout(() => {
      void this.end(rolloutId, 'timeout', `timed out after ${batch.params.timeoutMs / 1000} s`).catch(() => undefined);
    }, batch.params.timeoutMs);
    flight.timer.unref();
    return { rolloutId, url: `${this.options.baseUrl()}/r/${started.key}`, task: started.rollout.task?.input ?? null };
  }

  /** Whether the rollout is an attempt in flight in a worker batch (its `/finish` is served here). */
  owns(rolloutId: string): boolean {
    return this.byRollout.has(rolloutId);
  }

  /** Ends an attempt in flight: `POST {url}/finish`, its timeout, or its worker's death. */
  async end(rolloutId: string, to: Ending, error: string | null): Promise<Rollout> {
    const batch = this.byRollout.get(rolloutId);
    const flight = batch?.inFlight.get(rolloutId);
    if (!batch || !flight) throw new NotFoundError(`rollout ${rolloutId} has no attempt in flight in a worker batch`);
    this.forget(batch, rolloutId);
    batch.settling += 1;
    try {
      const { ended, retrying } = await this.options.writes.submit(() => {
        const ended = this.options.store.transitionRollout({
          id: rolloutId,
          to,
          error,
          exitCode: null,
          node: batch.nodes.get(flight.worker),
        });
        const retrying = !batch.cancelled && canRetry(ended);
        if (retrying)
          this.options.store.transitionRollout({ id: rolloutId, to: 'queued', error: null, exitCode: null });
        return { ended, retrying };
      });
      if (retrying) batch.queue.push(rolloutId);
      if (!batch.nodes.has(flight.worker)) {
        const unplaced = batch.endedUnplaced.get(flight.worker) ?? [];
        if (unplaced.length < MAX_UNPLACED) unplaced.push([rolloutId, ended.attemptCount]);
        batch.endedUnplaced.set(flight.worker, unplaced);
      }
      // A timed-out attempt's worker that holds no other attempt and is not waiting for one is restarted by its
      // runner: it may be stuck where its revoked URL cannot reach it.
      const stuck =
        to === 'timeout' &&
        !(batch.waiting.get(flight.worker) ?? 0) &&
        ![...batch.inFlight.values()].some((other) => other.worker === flight.worker);
      // It takes nothing more: a worker that was only slow sees its URL revoked, asks for more, gets 204 and exits.
      if (stuck) batch.retired.add(flight.worker);
      batch.ended({
        rollout: ended,
        durationMs: Date.now() - flight.startedAt,
        retrying,
        ...(stuck ? { restartWorker: flight.worker } : {}),
      });
      return ended;
    } finally {
      batch.settling -= 1;
      batch.wake();
    }
  }

  /** The worker died: its attempts in flight fail (and are retried where attempts are left). */
  async workerExited(
    id: string,
    worker: string,
    error: string,
  ): Promise<{ failed: number; done: boolean; retired: boolean }> {
    const batch = this.get(id);
    const mine = [...batch.inFlight].filter(([, flight]) => flight.worker === worker).map(([rolloutId]) => rolloutId);
    await Promise.all(mine.map((rolloutId) => this.end(rolloutId, 'failed', `the agent worker ${error}`)));
    return { failed: mine.length, done: batch.done, retired: batch.retired.has(worker) };
  }

  /** Worker `worker` of batch `id` runs on `node` (a Ray node): the attempts it ends from now on record it. */
  async workerPlaced(id: string, worker: string, node: RayNode): Promise<{ placed: boolean }> {
    const batch = this.get(id);
    batch.nodes.set(worker, node);
    const unplaced = batch.endedUnplaced.get(worker) ?? [];
    batch.endedUnplaced.delete(worker);
    if (unplaced.length > 0)
      await this.options.writes.submit(
        () => unplaced.forEach(([rolloutId, attempt]) => this.options.store.setAttemptNode(rolloutId, attempt, node)),
        unplaced.length,
      );
    return { placed: true };
  }

  /** Cancels what is queued or in flight; idempotent. A done batch is closed (forgotten). */
  async cancel(id: string): Promise<number> {
    const batch = this.get(id);
    if (batch.done) {
      this.close(batch);
      return 0;
    }
    return this.stop(batch, 'cancelled', 'the batch was cancelled', true);
  }

  /**
   * Stops a batch: its workers get 204 from now on; its attempts in flight end `to` (`error`, their key revoked), and
   * what is queued with them when `queued` (else it stays queued in the store). Returns how many rollouts it ended.
   */
  private async stop(
    batch: WorkerBatchState,
    to: 'cancelled' | 'failed',
    error: string,
    queued: boolean,
  ): Promise<number> {
    batch.cancelled = true;
    const waiting = batch.queue.splice(0);
    const ids = [...(queued ? waiting : []), ...batch.inFlight.keys()];
    const nodes = new Map(
      [...batch.inFlight].map(([rolloutId, flight]) => [rolloutId, batch.nodes.get(flight.worker)]),
    );
    for (const rolloutId of batch.inFlight.keys()) this.forget(batch, rolloutId);
    batch.wake();
    await this.options.writes.submit(() => {
      for (const rolloutId of ids)
        this.options.store.transitionRollout({ id: rolloutId, to, error, exitCode: null, node: nodes.get(rolloutId) });
    }, ids.length);
    return ids.length;
  }

  private forget(batch: WorkerBatchState, rolloutId: string): void {
    clearTimeout(batch.inFlight.get(rolloutId)?.timer);
    batch.inFlight.delete(rolloutId);
    if (this.byRollout.get(rolloutId) === batch) this.byRollout.delete(rolloutId);
  }

  /** Takes `rolloutId` out of every open batch's queue and attempts in flight, with no change to the rollout. */
  private takeOver(rolloutId: string): void {
    for (const batch of this.batches.values()) {
      const queued = batch.queue.indexOf(rolloutId);
      if (queued >= 0) batch.queue.splice(queued, 1);
      if (batch.inFlight.has(rolloutId)) this.forget(batch, rolloutId);
      batch.wake();
    }
  }

  private close(batch: WorkerBatchState): void {
    this.batches.delete(batch.id);
    this.byKey.delete(batch.key);
    batch.wake();
  }

  private get(id: string): WorkerBatchState {
    const batch = this.batches.get(id);
    if (!batch) throw new NotFoundError(`worker batch ${id} is not open in this daemon`);
    return batch;
  }

  /**
   * Batches whose runner stopped polling (it died): stopped, so that their workers stop, then forgotten. Their attempts
   * in flight fail as a dead runner's attempts do; their queued rollouts stay queued: `dataset run --resume` runs them,
   * and retries those attempts. Cancelling them made a resume find nothing to run.
   */
  private sweep(): void {
    const now = Date.now();
    for (const batch of this.batches.values()) {
      if (batch.followers.size > 0 || now - batch.lastPoll < this.leaseMs) continue;
      if (batch.done) this.close(batch);
      else {
        this.options.logger.warn(
          'a worker batch’s runner stopped polling: its workers stop, its attempts in flight fail, its queued rollouts stay queued for `dataset run --resume`',
          { batch: batch.id, inFlight: batch.inFlight.size, queued: batch.queue.length },
        );
        void this.stop(batch, 'failed', 'the runner stopped during this attempt', false).catch((error: unknown) =>
          this.options.logger.error('could not stop a worker batch', { batch: batch.id, error: errorMessage(error) }),
        );
      }
    }
  }

  dispose(): void {
    this.disposed = true;
    clearInterval(this.sweeper);
    for (const batch of this.batches.values()) batch.wake();
  }
}
