/**
 * Serving a saved checkpoint outside training ("Lightning: Use Checkpoint"): the daemon loads one
 * checkpoint at a time in its own trainer worker and serves it as an OpenAI-compatible endpoint;
 * rollouts that choose it send their LLM calls there, with exact token ids, and record the
 * checkpoint as their `policy` resource. `checkpointRouting` is that choice, made once for every
 * client (the editor's debug sessions and batches, `lightning run` and `lightning dataset run`);
 * `describeMetrics` (format.ts, zod-free for the webview) is how a checkpoint is summed up wherever one is offered.
 */
import { z } from 'zod';

export { describeMetrics } from './format';

/** The `policy` resource's value: which policy served a rollout — a training iteration's, or a checkpoint in use. */
export const PolicyRef = z.object({
  runId: z.string(),
  step: z.number().int().nonnegative(),
  /** The checkpoint's folder; null for a training run's initial policy. */
  checkpoint: z.string().nullable(),
  /** Set when a checkpoint was served outside training (`policy/serve`). */
  checkpointId: z.string().nullable().default(null),
});
export type PolicyRef = z.infer<typeof PolicyRef>;

export const PolicyDevice = z.enum(['auto', 'cpu', 'cuda']);
export type PolicyDevice = z.infer<typeof PolicyDevice>;

export const ServePolicyParams = z.strictObject({
  /** A checkpoint id from `checkpoints/list` (`ckpt-…`). */
  checkpointId: z.string().min(1).max(200),
  /** Where the policy runs; default: the device its training run used (`auto` when it had none). */
  device: PolicyDevice.optional(),
  /** The Python that runs the worker; default: the training run's, else found as `lightning doctor` does. */
  python: z.string().min(1).optional(),
  /**
   * Replace another checkpoint even while rollouts pinned to it are queued or running (their
   * agents then lose their model); without it such a switch is refused (-32009).
   */
  force: z.boolean().optional(),
});
export type ServePolicyParams = z.input<typeof ServePolicyParams>;

/** The checkpoint being served, and where. */
export const ServedPolicy = z.object({
  checkpointId: z.string(),
  runId: z.string(),
  step: z.number().int().nonnegative(),
  /** The policy server's base URL (`http://127.0.0.1:PORT`); its OpenAI API is under `/v1`. */
  url: z.string().url(),
  /** The version of the `policy` resource that names this checkpoint: rollouts it serves are pinned to it. */
  policyVersion: z.number().int().positive(),
  /** `cpu` or `cuda[:N]`, as the worker loaded it. */
  device: z.string(),
  startedAt: z.number(),
});
export type ServedPolicy = z.infer<typeof ServedPolicy>;

/** `policy/changed`: what is served now (null: nothing), and why it stopped when the worker crashed. */
export const PolicyChanged = z.object({
  served: ServedPolicy.nullable(),
  /** The crash, with the Python traceback; null when serving started or was stopped on request. */
  error: z.string().nullable(),
});
export type PolicyChanged = z.infer<typeof PolicyChanged>;

/** What a rollout served by `served` is started with (`agentRuns/start`, `rollouts/create` + the batch runner). */
export interface CheckpointRouting {
  /** The rollout's upstream: the policy server's OpenAI API. */
  readonly upstream: string;
  /** Exact token ids and logprobs on every call, as in training. */
  readonly tokenIds: true;
  /** Records which checkpoint served the rollout. */
  readonly resources: { readonly policy: number };
}

export function checkpointRouting(served: ServedPolicy): CheckpointRouting {
  return { upstream: `${served.url}/v1`, tokenIds: true, resources: { policy: served.policyVersion } };
}
