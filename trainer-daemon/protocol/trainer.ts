/**
 * The trainer worker protocol v1 (trainer-daemon/python/PROTOCOL.md): line-delimited JSON between the
 * daemon and the Python worker over stdio. Every line the worker writes is checked against these
 * schemas on receipt; every request the daemon sends is built from their input types.
 */
import { z } from 'zod';

export const WORKER_PROTOCOL_VERSION = 1;

export const CudaInfo = z.object({ name: z.string(), memoryFreeBytes: z.number(), memoryTotalBytes: z.number() });
export type CudaInfo = z.infer<typeof CudaInfo>;

/** The worker's first line: what it runs on. */
export const WorkerReady = z.object({
  type: z.literal('ready'),
  protocol: z.number().int(),
  python: z.string(),
  torch: z.string(),
  device: z.enum(['cpu', 'cuda']),
  cuda: CudaInfo.nullable(),
  transformers: z.string().nullable(),
  peft: z.string().nullable(),
  /** Under torchrun (python/lightning_trainer/ddp_worker.py): the world and where each rank runs. */
  distributed: z
    .object({
      worldSize: z.number().int().positive(),
      backend: z.string(),
      ranks: z.array(
        z.object({
          rank: z.number().int(),
          localRank: z.number().int(),
          pid: z.number().int(),
          host: z.string(),
          device: z.string(),
        }),
      ),
    })
    .optional(),
});
export type WorkerReady = z.infer<typeof WorkerReady>;

export const WorkerErrorKind = z.enum(['bad_params', 'runtime', 'oom', 'state']);
export type WorkerErrorKind = z.infer<typeof WorkerErrorKind>;

export const WorkerResponse = z.union([
  z.object({ type: z.literal('response'), id: z.number().int(), result: z.record(z.string(), z.unknown()) }),
  z.object({
    type: z.literal('response'),
    /** null: the worker could not read the request line at all. */
    id: z.number().int().nullable(),
    error: z.object({ kind: WorkerErrorKind, message: z.string(), traceback: z.string().optional() }),
  }),
]);
export type WorkerResponse = z.infer<typeof WorkerResponse>;

export const WorkerEvent = z.object({
  type: z.literal('event'),
  event: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type WorkerEvent = z.infer<typeof WorkerEvent>;

/** Any line after the ready line. */
export const WorkerMessage = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('response'),
    id: z.number().int().nullable(),
    result: z.record(z.string(), z.unknown()).optional(),
    error: z.unknown().optional(),
  }),
  WorkerEvent,
]);

export const TinyModelSpec = z.strictObject({
  kind: z.literal('tiny'),
  config: z
    .strictObject({
      dModel: z.number().int().positive().optional(),
      layers: z.number().int().positive().optional(),
      heads: z.number().int().positive().optional(),
      context: z.number().int().positive().optional(),
    })
    .optional(),
});
export const HfModelSpec = z.strictObject({
  kind: z.literal('hf'),
  /** A local path or a Hugging Face hub id. */
  name: z.string().min(1),
  fromConfig: z.boolean().optional(),
  dtype: z.enum(['bfloat16', 'float32']).optional(),
});
export const ModelSpec = z.discriminatedUnion('kind', [TinyModelSpec, HfModelSpec]);
export type ModelSpec = z.infer<typeof ModelSpec>;

export const AdapterSpec = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('full') }),
  z.strictObject({
    kind: z.literal('lora'),
    rank: z.number().int().positive().optional(),
    alpha: z.number().positive().optional(),
    dropout: z.number().min(0).max(1).optional(),
    targets: z.array(z.string()).optional(),
    /** Also train the norm layers (PEFT's modules_to_save); default true. */
    trainNorms: z.boolean().optional(),
  }),
]);
export type AdapterSpec = z.infer<typeof AdapterSpec>;

/**
 * A policy's name: a letter, then letters, digits, `_` or `-` (40 at most); not `base` or `default` (the base model's
 * route, peft's name for a lone adapter).
 */
export const PolicyName = z
  .string()
  .regex(/^[A-Za-z][A-Za-z0-9_-]{0,39}$/, 'a letter, then up to 39 letters, digits, _ or -')
  .refine((name) => name !== 'base' && name !== 'default', 'base and default are reserved');

/**
 * One policy of a run with several: a LoRA adapter of its own on the shared base model (PROTOCOL.md, "Several
 * policies").
 */
export const PolicyAdapter = z.object({
  name: PolicyName,
  /** A checkpoint `save {adapter}` wrote for this policy: its weights (and optimizer state) are restored into it. */
  checkpoint: z.string().optional(),
});
export type PolicyAdapter = z.infer<typeof PolicyAdapter>;

export const LoadParams = z
  .object({
    /** Optional with `checkpoint`: then read from the checkpoint's config.json (PROTOCOL.md). */
    model: ModelSpec.optional(),
    adapter: AdapterSpec.optional(),
    optimizer: z
      .object({
        lr: z.number().positive().optional(),
        weightDecay: z.number().min(0).optional(),
        gradClip: z.number().positive().optional(),
      })
      .optional(),
    device: z.enum(['auto', 'cpu', 'cuda']).optional(),
    seed: z.number().int().optional(),
    /** A directory written by `save`: weights, optimizer and step are restored from it. */
    checkpoint: z.string().optional(),
    /** torch threads (one is fastest on small CPUs). */
    threads: z.number().int().positive().optional(),
    /** Under torchrun only: shard the policy across the ranks (FSDP2) instead of replicating it (PROTOCOL.md). */
    fsdp: z.boolean().optional(),
    /** Several policies: one LoRA adapter each (HF + LoRA without trained norms), each with its own optimizer. */
    policies: z.array(PolicyAdapter).min(1).optional(),
  })
  .refine((p) => p.checkpoint !== undefined || (p.model !== undefined && p.adapter !== undefined), {
    message: 'model and adapter are required without a checkpoint',
  });
export type LoadParams = z.infer<typeof LoadParams>;
export const LoadResult = z.object({
  parameters: z.number(),
  trainable: z.number(),
  device: z.string(),
  dtype: z.string(),
  step: z.number().int(),
  modelName: z.string(),
  /** The policies loaded (`load {policies}`), one adapter each. */
  policies: z.array(z.string()).optional(),
});
export type LoadResult = z.infer<typeof LoadResult>;

export const ServeParams = z.object({
  host: z.string().optional(),
  port: z.number().int().optional(),
  maxBatch: z.number().int().positive().optional(),
});
export const ServeResult = z.object({ url: z.string().url() });

export const SftExample = z.object({
  messages: z.array(z.record(z.string(), z.unknown())),
  tools: z.array(z.record(z.string(), z.unknown())).optional(),
  /** The assistant's reply with OpenAI's wire names: text, or tool calls. */
  completion: z.object({ content: z.string().optional(), tool_calls: z.array(z.unknown()).optional() }),
});
export type SftExample = z.infer<typeof SftExample>;
export const SftParams = z.object({
  examples: z.array(SftExample).min(1),
  steps: z.number().int().positive().optional(),
  batchSize: z.number().int().positive().optional(),
  lr: z.number().positive().optional(),
  seed: z.number().int().optional(),
  /** Stop early once this fraction of sampled completions (temperature 1) equals the demonstration exactly. */
  untilSampledAccuracy: z
    .object({
      threshold: z.number().min(0).max(1),
      every: z.number().int().positive().optional(),
      samples: z.number().int().positive().optional(),
    })
    .optional(),
  /** Passes over the examples, each in a fresh random order, instead of `steps` batches drawn with replacement. */
  epochs: z.number().int().positive().optional(),
});
export type SftParams = z.infer<typeof SftParams>;
export const SftResult = z.object({
  /** The last step's loss (token mean over its batch). */
  loss: z.number(),
  /** The mean of the steps' losses. */
  meanLoss: z.number().optional(),
  steps: z.number().int(),
  /** Completion tokens trained on, over every step. */
  tokens: z.number().int().optional(),
  seconds: z.number(),
  sampledAccuracy: z.number().nullable().optional(),
});

/**
 * Held-out demonstrations: their loss, and how many the policy reproduces decoding greedily (python/…/supervised.py).
 */
export const EvaluateParams = z.object({
  examples: z.array(SftExample).min(1),
  /** Greedy generations for the accuracy: the first `generate` examples; absent: all. */
  generate: z.number().int().nonnegative().optional(),
  batchSize: z.number().int().positive().optional(),
});
export const EvaluateResult = z.object({
  /** Token-mean cross-entropy of the completions (nats per token). */
  loss: z.number(),
  tokens: z.number().int(),
  examples: z.number().int(),
  generated: z.number().int(),
  exact: z.number().int(),
  /** exact / generated; null when nothing was generated. */
  accuracy: z.number().nullable(),
  seconds: z.number(),
});

/** The policy-gradient loss's aggregation, as TRL's GRPOTrainer names it (python/lightning_trainer/train.py). */
export const LossType = z.enum(['grpo', 'bnpo', 'dr_grpo', 'dapo']);
export type LossType = z.infer<typeof LossType>;

export const WorkerTransition = z.object({
  promptIds: z.array(z.number().int()),
  responseIds: z.array(z.number().int()),
  logprobs: z.array(z.number()).nullable(),
  advantage: z.number(),
  /** Per response token; 0 = an environment token, left out of the loss. */
  mask: z.array(z.union([z.literal(0), z.literal(1)])).optional(),
});
export type WorkerTransition = z.infer<typeof WorkerTransition>;
export const TrainParams = z.object({
  transitions: z.array(WorkerTransition).min(1),
  epochs: z.number().int().positive().optional(),
  minibatch: z.number().int().positive().optional(),
  microBatch: z.number().int().positive().optional(),
  seed: z.number().int().optional(),
  clip: z.number().positive().optional(),
  clipHigh: z.number().positive().optional(),
  klCoef: z.number().min(0).optional(),
  /**
   * With klCoef 0 the KL is only reported: whether this update measures it (a reference forward over every 8th row;
   * default true). The GRPO loop asks on its first, validated and last iterations (grpo.ts klSampled).
   */
  klSample: z.boolean().optional(),
  /** TRL's use_bias_correction_kl: the KL term weighted by the importance ratio. */
  klBiasCorrection: z.boolean().optional(),
  entropyCoef: z.number().min(0).optional(),
  lossType: LossType.optional(),
  /** dr_grpo's divisor per sequence; default: the longest response of the call. */
  maxResponseLength: z.number().int().positive().optional(),
  /** With several policies loaded: the policy whose adapter this update trains (required then). */
  adapter: z.string().optional(),
});
export type TrainParams = z.infer<typeof TrainParams>;
export const TrainResult = z.object({
  step: z.number().int(),
  loss: z.number(),
  pgLoss: z.number(),
  /** To the reference; absent when the update did not measure it (klCoef 0 and klSample false). */
  kl: z.number().optional(),
  entropy: z.number(),
  clipFraction: z.number(),
  maxRatioDeviation: z.number(),
  tokens: z.number().int(),
  seconds: z.number(),
  gpuMemoryBytes: z.number().nullable().optional(),
  /** Under torchrun: the ranks that made the update (ddp_worker.py). */
  worldSize: z.number().int().positive().optional(),
});
export type TrainResult = z.infer<typeof TrainResult>;

export const SaveParams = z.object({
  dir: z.string().min(1),
  metrics: z.record(z.string(), z.number()).optional(),
  /** With several policies loaded: the policy whose adapter (and optimizer) the checkpoint holds (required then). */
  adapter: z.string().optional(),
});
export const SaveResult = z.object({ path: z.string(), bytes: z.number() });

/**
 * Writes a checkpoint folder as a PEFT adapter or a Hugging Face model folder (python/lightning_trainer/export.py),
 * or a set of policies' checkpoints (`adapters`) as one PEFT folder with an adapter each.
 */
export const ExportParams = z.object({
  checkpoint: z.string().min(1).optional(),
  adapters: z.array(PolicyAdapter).min(1).optional(),
  format: z.enum(['peft', 'hf', 'merged']),
  out: z.string().min(1),
});
export const ExportResult = z.object({
  path: z.string(),
  format: z.enum(['peft', 'hf', 'merged']),
  bytes: z.number().int().nonnegative(),
  files: z.array(z.string()),
  baseModel: z.string().nullable(),
});

export const TokenizeParams = z.object({
  messages: z.array(z.record(z.string(), z.unknown())),
  tools: z.array(z.record(z.string(), z.unknown())).optional(),
});
export const TokenizeResult = z.object({ ids: z.array(z.number().int()), text: z.string() });

interface WorkerMethodSpec<P extends z.ZodType, R extends z.ZodType> {
  readonly params: P;
  readonly result: R;
}
const workerMethod = <P extends z.ZodType, R extends z.ZodType>(params: P, result: R): WorkerMethodSpec<P, R> => ({
  params,
  result,
});

/** Every worker method, params → result. */
export const WorkerMethods = {
  load: workerMethod(LoadParams, LoadResult),
  serve: workerMethod(ServeParams, ServeResult),
  sft: workerMethod(SftParams, SftResult),
  evaluate: workerMethod(EvaluateParams, EvaluateResult),
  train: workerMethod(TrainParams, TrainResult),
  save: workerMethod(SaveParams, SaveResult),
  export: workerMethod(ExportParams, ExportResult),
  tokenize: workerMethod(TokenizeParams, TokenizeResult),
  shutdown: workerMethod(z.object({}), z.object({})),
} as const;
export type WorkerMethodName = keyof typeof WorkerMethods;
export type WorkerParamsOf<M extends WorkerMethodName> = z.input<(typeof WorkerMethods)[M]['params']>;
export type WorkerResultOf<M extends WorkerMethodName> = z.infer<(typeof WorkerMethods)[M]['result']>;

/** `python -m lightning_trainer.doctor` (one JSON object): what this Python can do, and how to fix what is missing. */
export const DoctorReport = z.object({
  python: z.string(),
  executable: z.string(),
  torch: z.string().nullable(),
  device: z.enum(['cpu', 'cuda']),
  cuda: CudaInfo.nullable(),
  transformers: z.string().nullable(),
  peft: z.string().nullable(),
  /** Which BLAS torch's CPU matmuls use (`reference` is ~15× slower than `openblas`). */
  blas: z.string().nullable(),
  pipReachesIndex: z.boolean(),
  /** `optional`: only some features need it (Hugging Face models, a GPU). */
  problems: z.array(z.object({ problem: z.string(), fix: z.string(), optional: z.boolean().optional() })),
  /** No required problem. */
  ok: z.boolean(),
});
export type DoctorReport = z.infer<typeof DoctorReport>;

/**
 * One Python `lightning doctor` tried: where it came from (`--python`, `LIGHTNING_PYTHON`, `venv`, `system`, `PATH`).
 */
export const PythonProbe = z.object({
  executable: z.string(),
  origin: z.string(),
  version: z.string().nullable(),
  torch: z.string().nullable(),
  /** Why it cannot be used (not found, no torch); null when it can. */
  problem: z.string().nullable(),
});
export type PythonProbe = z.infer<typeof PythonProbe>;

/** What `lightning doctor --json` (and `doctor --setup --json`) prints: the editor's Set Up Trainer reads it. */
export const DoctorDiagnosis = z.object({
  /** Every candidate, in the order they were tried. */
  candidates: z.array(PythonProbe),
  /** The Python the trainer would use, or null. */
  chosen: PythonProbe.nullable(),
  /** The worker package's own report on the chosen Python. */
  report: DoctorReport.nullable(),
  problems: z.array(z.object({ problem: z.string(), fix: z.string(), optional: z.boolean().optional() })),
  /** `--setup` only: pip could not install torch, and this installs Debian's instead (as root). */
  aptCommand: z.string().optional(),
});
export type DoctorDiagnosis = z.infer<typeof DoctorDiagnosis>;
