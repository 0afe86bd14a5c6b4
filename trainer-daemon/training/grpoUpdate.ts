/**
 * What one GRPO iteration asks the trainer worker to train (its `train` request): the transitions as token ids, the
 * advantages' options, dr_grpo's divisor from the calls' generation caps, and whether the update measures the KL.
 * Pure: the loop (grpo.ts) builds each update with it, and the tests check what it asks.
 */
import type { AdvantageOptions, GrpoConfig, TrainParams, Trajectory, Transition, WorkerTransition } from '../protocol';

/**
 * Transitions the worker can train on: exact token ids; those whose advantage is 0 too unless `zeroAdvantage`
 * is `drop` (TRL keeps them: they count in the loss's normaliser, and the KL and entropy terms act on them).
 */
export function toWorkerTransitions(
  transitions: readonly Transition[],
  zeroAdvantage: 'keep' | 'drop' = 'keep',
): WorkerTransition[] {
  return transitions.flatMap((t) => {
    if (!hasTokenIds(t)) return [];
    if (zeroAdvantage === 'drop' && t.advantage === 0) return [];
    const logprobs = t.logprobs && t.logprobs.length === t.responseTokenIds.length ? t.logprobs : null;
    const mask = t.lossMask?.length === t.responseTokenIds.length ? (t.lossMask as Array<0 | 1>) : undefined;
    return [
      {
        promptIds: t.promptTokenIds,
        responseIds: t.responseTokenIds,
        logprobs,
        advantage: t.advantage,
        ...(mask ? { mask } : {}),
      },
    ];
  });
}

/** Whether a transition has the exact token ids an update needs (a call the policy answered, with a response). */
function hasTokenIds(t: Transition): t is Transition & { promptTokenIds: number[]; responseTokenIds: number[] } {
  return t.promptTokenIds !== null && t.responseTokenIds !== null && t.responseTokenIds.length > 0;
}

/**
 * One policy's update from its transitions: what the worker trains on, the max_tokens its calls asked for
 * (`maxTokens`, by span: dr_grpo's divisor), and how many calls had no token ids (answered by a model other than the
 * policy, or with no response), which are left out and counted, their caps with them.
 */
export function policyUpdate(
  transitions: readonly Transition[],
  zeroAdvantage: 'keep' | 'drop',
  maxTokens: ReadonlyMap<string, number>,
): { trainable: WorkerTransition[]; requestedCaps: number[]; noTokenIds: number } {
  const withIds = transitions.filter(hasTokenIds);
  return {
    trainable: toWorkerTransitions(withIds, zeroAdvantage),
    requestedCaps: withIds.flatMap((t) => t.spanIds.flatMap((id) => maxTokens.get(id) ?? [])),
    noTokenIds: transitions.length - withIds.length,
  };
}

/**
 * The advantages GRPO trains on, as TRL's GRPOTrainer computes them: (R − mean) / (std + 1e-4), std with Bessel's
 * correction unless the config asks for the population std (`--std population`).
 */
export function grpoAdvantageOptions(config: Pick<GrpoConfig, 'scaleRewards' | 'std'>): AdvantageOptions {
  return { kind: 'grpo', normalizeStd: config.scaleRewards === 'group', std: config.std, epsilon: 1e-4 };
}

/**
 * dr_grpo's divisor per sequence (TRL's `max_completion_length`): `--max-response-length` when given, else the
 * generation cap the iteration's calls ran under — the largest `max_tokens` they asked for (`requestedCaps`), never
 * below the longest response (aggregated sequences can be longer than one call's cap) — and the longest response
 * when no call named a cap. Undefined for the other loss types, which do not read it.
 */
export function drGrpoMaxResponseLength(
  config: Pick<GrpoConfig, 'lossType' | 'maxResponseLength'>,
  transitions: readonly WorkerTransition[],
  requestedCaps: readonly number[] = [],
): number | undefined {
  if (config.lossType !== 'dr_grpo') return undefined;
  if (config.maxResponseLength !== null) return config.maxResponseLength;
  const longest = transitions.reduce((most, t) => Math.max(most, t.responseIds.length), 1);
  return requestedCaps.reduce((most, cap) => Math.max(most, cap), longest);
}

/** The `max_tokens` each of a batch's LLM calls asked for (recorded as `gen_ai.request.max_tokens`), by span id. */
export function requestedMaxTokens(trajectories: readonly Trajectory[]): Map<string, number> {
  const caps = new Map<string, number>();
  for (const { spans } of trajectories) {
    for (const span of spans) {
      const cap = span.attributes['gen_ai.request.max_tokens'];
      if (typeof cap === 'number' && Number.isInteger(cap) && cap > 0) caps.set(span.spanId, cap);
    }
  }
  return caps;
}

/**
 * The worker's `train` request for one iteration's transitions (`requestedCaps`: their calls' max_tokens). Iteration
 * `step`'s minibatches are drawn with a seed of its own (the run's seed and the step, as its tasks are): the same
 * seed every iteration would put the same positions of each batch together every time.
 */
export function workerTrainParams(
  config: GrpoConfig,
  transitions: WorkerTransition[],
  requestedCaps: readonly number[] = [],
  step?: number,
): TrainParams {
  const maxResponseLength = drGrpoMaxResponseLength(config, transitions, requestedCaps);
  return {
    ...(step === undefined || klSampled(config, step) ? {} : { klSample: false }),
    ...(step === undefined ? {} : { seed: stepSeed(config.seed, step) }),
    transitions,
    ...(maxResponseLength === undefined ? {} : { maxResponseLength }),
    epochs: config.epochs,
    minibatch: config.minibatch,
    clip: config.clip,
    ...(config.clipHigh === null ? {} : { clipHigh: config.clipHigh }),
    lossType: config.lossType,
    klCoef: config.klCoef,
    klBiasCorrection: config.klBiasCorrection,
    entropyCoef: config.entropyCoef,
  };
}

/**
 * The seed of step `n` of a run seeded `seed` (an iteration's minibatch order, an SFT epoch's shuffle): its own for
 * each step, `seed × 100003 + n` for the seeds people type, and within torch's seed range (and exact in a double)
 * whatever `--seed` says.
 */
export function stepSeed(seed: number, n: number): number {
  return ((seed % 1_000_003) * 100_003 + n) % 2_147_483_647;
}

/**
 * Whether the update of iteration `step` measures the KL to the reference when klCoef is 0 (then only reported): on
 * the first iteration, each validated one and the last — the KL chart's points — and not in between, where that
 * reference forward would be the update's largest cost after the training pass itself (TRL logs no KL at 0).
 */
export function klSampled(config: Pick<GrpoConfig, 'klCoef' | 'evalEvery' | 'iterations'>, step: number): boolean {
  return config.klCoef > 0 || step === 1 || step % config.evalEvery === 0 || step === config.iterations;
}
