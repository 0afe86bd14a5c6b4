/**
 * The worker-mode batch protocol (docs/datasets.md, "Worker mode"): the RPC params and results with
 * which a runner opens a batch on the daemon, follows its attempts, reports dead workers and
 * cancels it; and the HTTP bodies long-lived agent workers exchange under `LIGHTNING_RUNNER_URL`.
 */
import { z } from 'zod';
import { Json, RayNode, Rollout } from './records';
import { ProviderUpstreams } from './agentEnv';

const BatchHandle = z.string().min(1).max(200);

/** An attempt's longest time limit (a week; Node's timers hold at most 2^31 ms, ~24.8 days, then fire at once). */
export const MAX_ATTEMPT_TIMEOUT_SECONDS = 7 * 86_400;

export const OpenWorkerBatchParams = z.strictObject({
  /** Queued rollouts (of one batch) the workers will take, in this order. */
  rolloutIds: z.array(z.string().min(1).max(200)).min(1).max(1_000_000),
  /** Where the rollouts' LLM calls go (e.g. the policy server); null for the daemon's upstream. */
  upstream: z
    .string()
    .regex(/^https?:\/\/[^\s/?#]+/i, 'upstream must be an http(s) URL, e.g. http://127.0.0.1:11434/v1')
    .nullable()
    .default(null),
  /** Where their Anthropic and Gemini calls go (the user's own base URLs); absent, the provider's. */
  providerUpstreams: ProviderUpstreams.default({}),
  /** Ask the serving engine for exact token ids and logprobs on every call. */
  tokenIds: z.boolean().default(false),
  /** Per-attempt limit: an attempt not finished in time becomes `timeout` and its URL is revoked. */
  timeoutMs: z
    .number()
    .int()
    .min(1)
    .max(MAX_ATTEMPT_TIMEOUT_SECONDS * 1000),
  /** Rollouts one worker may hold at once (a further `/next` is refused with 409). */
  concurrencyPerWorker: z.number().int().min(1).max(10_000).default(1),
});
export type OpenWorkerBatchParams = z.input<typeof OpenWorkerBatchParams>;

export const WorkerBatch = z.object({
  /** The batch's handle for the other runner methods. */
  id: z.string(),
  /**
   * The batch's capability URL `http://127.0.0.1:PORT/b/<key>`; worker W gets
   * `LIGHTNING_RUNNER_URL=<url>/<W>` (W: 1–32 of `A-Za-z0-9_-`), so the daemon knows whose rollouts
   * to fail when a worker dies.
   */
  url: z.string().url(),
});
export type WorkerBatch = z.infer<typeof WorkerBatch>;

/** One attempt that ended, as the runner reports progress. */
export const AttemptEnded = z.object({
  rollout: Rollout,
  durationMs: z.number().nonnegative(),
  /** The rollout was queued again (failed or timed out with attempts left). */
  retrying: z.boolean(),
  /**
   * Worker mode: the attempt timed out, and the worker that ran it holds no other attempt and is not waiting for one.
   * The daemon answers that worker's `/next` 204 from now on (it takes nothing more), and a local runner stops it if it
   * is still running a few seconds later: it may be stuck outside HTTP (a tool that never returns) for good.
   */
  restartWorker: z.string().optional(),
});
export type AttemptEnded = z.infer<typeof AttemptEnded>;

export const WorkerBatchEventsParams = z.strictObject({
  id: BatchHandle,
  /** Events already seen (the previous answer's `next`). */
  after: z.number().int().nonnegative().default(0),
  /** How long to wait for an event when there is none yet (long poll). */
  waitMs: z.number().int().min(0).max(30_000).default(5_000),
});
export type WorkerBatchEventsParams = z.input<typeof WorkerBatchEventsParams>;

export const WorkerBatchEvents = z.object({
  events: z.array(AttemptEnded),
  next: z.number().int().nonnegative(),
  /** Every rollout reached a final status (or the batch was cancelled). */
  done: z.boolean(),
  cancelled: z.boolean(),
});
export type WorkerBatchEvents = z.infer<typeof WorkerBatchEvents>;

export const WorkerExitedParams = z.strictObject({
  id: BatchHandle,
  worker: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, 'worker must be 1–32 characters of A-Za-z0-9_-'),
  /** Why it ended, e.g. "exited with code 1": the error of its unfinished rollouts. */
  error: z.string().min(1).max(10_000),
});
export type WorkerExitedParams = z.input<typeof WorkerExitedParams>;

export const WorkerPlacedParams = z.strictObject({
  id: BatchHandle,
  worker: WorkerExitedParams.shape.worker,
  /** The Ray node the worker's task runs on. */
  node: RayNode,
});
export type WorkerPlacedParams = z.input<typeof WorkerPlacedParams>;

export const WorkerExited = z.object({
  /** The worker's rollouts that were failed (and retried where attempts were left). */
  failed: z.number().int().nonnegative(),
  /** The batch has nothing left to run: no replacement worker is needed. */
  done: z.boolean(),
  /** The daemon had retired the worker after a timeout (`restartWorker`): its replacement is not a restart to count. */
  retired: z.boolean().default(false),
});
export type WorkerExited = z.infer<typeof WorkerExited>;

export const CancelWorkerBatchParams = z.strictObject({ id: BatchHandle });
export type CancelWorkerBatchParams = z.input<typeof CancelWorkerBatchParams>;

/** `POST $LIGHTNING_RUNNER_URL/next` → this (or 204 when the batch is done). */
export const WorkerAssignment = z.object({
  rolloutId: z.string(),
  /** The rollout's capability URL; its OpenAI base URL is `url + "/v1"`. */
  url: z.string().url(),
  /** The task input (what `LIGHTNING_TASK` holds in process mode); null without a task. */
  task: Json.nullable(),
});
export type WorkerAssignment = z.infer<typeof WorkerAssignment>;

/** `POST {url}/finish`. */
export const FinishBody = z.strictObject({
  status: z.enum(['succeeded', 'failed']),
  error: z.string().max(10_000).optional(),
});
export type FinishBody = z.infer<typeof FinishBody>;
