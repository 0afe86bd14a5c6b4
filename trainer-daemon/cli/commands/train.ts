/**
 * `lightning train --algorithm grpo|apo … -- CMD`, `lightning train --algorithm sft …` and `lightning train --list`:
 * the commander wiring. The flags every algorithm reads are declared once; the flags only some algorithms read are
 * refused with the others (the error names the flag), and become each one's configuration in its own module
 * (trainGrpo.ts, trainApo.ts, trainSft.ts), which starts the run in the daemon and follows it. Defaults are the
 * configuration schemas' (protocol/training.ts, apo.ts).
 */
import { Option, type Command } from 'commander';
import { InvalidInputError } from '../../protocol/errors';
import {
  DEFAULT_SFT_MIN_REWARD,
  placementOf,
  RolloutMode,
  TrainingAlgorithm,
  type TrainingRunSummary,
} from '../../protocol';
import { assertNever } from '../../protocol/assert';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { table, time } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';
import { addRayOptions } from '../rayOptions';
import { runApoCommand, type ApoFlags } from './trainApo';
import { runGrpoCommand, type GrpoFlags } from './trainGrpo';
import { runSftCommand, type SftFlags } from './trainSft';

const ALGORITHMS: readonly TrainingAlgorithm[] = TrainingAlgorithm.options;

/** The flags (commander's keys) only some algorithms read, with the flag to name in an error. */
const OWN: Record<string, { readonly flag: string; readonly for: readonly TrainingAlgorithm[] }> = {
  ...only(['grpo', 'sft'], {
    model: '--model',
    fromConfig: '--from-config',
    lora: '--lora',
    lr: '--lr',
    device: '--device',
    python: '--python',
    resume: '--resume',
    keepCheckpoints: '--keep-checkpoints',
    agent: '--agent',
  }),
  ...only(['grpo', 'apo'], {
    val: '--val',
    timeout: '--timeout',
    rewards: '--rewards',
    workers: '--workers',
    agentMode: '--agent-mode',
  }),
  ...only(['grpo'], {
    iterations: '--iterations',
    samples: '--samples',
    tasksPerIteration: '--tasks-per-iteration',
    perWorker: '--per-worker',
    evalEvery: '--eval-every',
    warmStart: '--warm-start',
    warmStartSteps: '--warm-start-steps',
    warmStartUntil: '--warm-start-until',
    klCoef: '--kl-coef',
    lossType: '--loss-type',
    maxResponseLength: '--max-response-length',
    clip: '--clip',
    clipHigh: '--clip-high',
    scaleRewards: '--scale-rewards',
    std: '--std',
    klBiasCorrection: '--kl-bias-correction',
    zeroAdvantage: '--zero-advantage',
    nprocPerNode: '--nproc-per-node',
    fsdp: '--fsdp',
    nnodes: '--nnodes',
    rdzvEndpoint: '--rdzv-endpoint',
    ray: '--ray',
    rayPython: '--ray-python',
    rayWorkingDir: '--ray-working-dir',
    policy: '--policy',
    policyReward: '--policy-reward',
  }),
  ...only(['sft'], {
    minReward: '--min-reward',
    rewardName: '--reward-name',
    label: '--label',
    mode: '--mode',
    valFraction: '--val-fraction',
    epochs: '--epochs',
    batchSize: '--batch-size',
  }),
  ...only(['apo'], {
    resource: '--resource',
    beam: '--beam',
    branch: '--branch',
    rounds: '--rounds',
    gradientBatch: '--gradient-batch',
    valBatch: '--val-batch',
    critiqueModel: '--critique-model',
    editModel: '--edit-model',
    temperature: '--temperature',
    budgetCalls: '--budget-calls',
    budgetRollouts: '--budget-rollouts',
    callAttempts: '--call-attempts',
    concurrency: '--concurrency',
    match: '--match',
    promptFile: '--prompt-file',
    upstream: '--upstream',
  }),
};

function only(
  algorithms: readonly TrainingAlgorithm[],
  flags: Record<string, string>,
): Record<string, { flag: string; for: readonly TrainingAlgorithm[] }> {
  return Object.fromEntries(Object.entries(flags).map(([key, flag]) => [key, { flag, for: algorithms }]));
}

type TrainFlags = GlobalOptions & { algorithm: TrainingAlgorithm; list?: boolean } & Partial<
    Omit<GrpoFlags, 'algorithm'>
  > &
  Partial<Omit<ApoFlags, 'algorithm'>> &
  Partial<Omit<SftFlags, 'algorithm'>>;

/** Refuses a flag another algorithm reads, naming it and the algorithms it is for. */
function checkFlags(options: TrainFlags): void {
  for (const [key, { flag, for: algorithms }] of Object.entries(OWN)) {
    if (algorithms.includes(options.algorithm) || options[key as keyof TrainFlags] === undefined) continue;
    throw new InvalidInputError(
      `${flag}: applies to --algorithm ${algorithms.join(' and ')} only (this run is --algorithm ${options.algorithm})`,
    );
  }
}

/**
 * What `train --list` shows of a run's progress: GRPO's sampled and validation reward; SFT's held-out accuracy;
 * APO's best validation score (it samples no reward of its own).
 */
function headline(run: TrainingRunSummary): { reward: string; val: string } {
  const fixed = (value: number | undefined): string => value?.toFixed(2) ?? '-';
  switch (run.algorithm) {
    case 'grpo':
      return { reward: fixed(run.latest['reward/mean']), val: fixed(run.latest['val/reward']) };
    case 'apo':
      return { reward: '-', val: fixed(run.latest.best_val_score) };
    case 'sft':
      return { reward: '-', val: fixed(run.latest['val/accuracy']) };
    default:
      return assertNever(run);
  }
}

function printRuns(runs: readonly TrainingRunSummary[]): void {
  process.stdout.write(
    `${table(
      ['RUN', 'ALGORITHM', 'STATUS', 'STEP', 'REWARD', 'VAL', 'WHERE', 'CREATED'],
      runs.map((r) => [
        r.id,
        r.algorithm,
        r.status,
        String(r.step),
        headline(r).reward,
        headline(r).val,
        placementOf(r),
        time(r.createdAt),
      ]),
    )}\n`,
  );
}

async function listRuns(options: TrainFlags): Promise<void> {
  const { client, close } = await connectOrStartDaemon(resolveStore(options));
  try {
    const { items } = await client.request('listTrainingRuns', { limit: 500 });
    if (options.json) process.stdout.write(`${JSON.stringify(items)}\n`);
    else printRuns(items);
  } finally {
    await close();
  }
}

export function registerTrain(program: Command): void {
  const command = program
    .command('train')
    .description(
      'train an agent: grpo (default) trains its model with reinforcement learning on a dataset; sft fine-tunes a model on the rollouts rated good; apo optimizes a prompt template resource',
    )
    .argument(
      '[command...]',
      'the agent command (after --; grpo and apo, not sft); it reads its task from LIGHTNING_TASK (worker mode: takes rollouts from LIGHTNING_RUNNER_URL), its prompt from GET $LIGHTNING_URL/resources or LIGHTNING_RESOURCES',
    )
    .addOption(storeOption())
    .addOption(jsonOption())
    .addOption(new Option('--algorithm <name>', 'the training algorithm').choices([...ALGORITHMS]).default('grpo'))
    .option(
      '--dataset <name>',
      "training tasks: the dataset's (name or id) train split (all of it when it has none); sft: only rollouts of this dataset",
    )
    .option(
      '--val <name>',
      "grpo, apo: validation tasks (its val split, or all of it); default: the --dataset's val split",
    )
    .option('--seed <n>', 'seeds every random choice (default 0)')
    .option('--timeout <seconds>', 'grpo, apo: per-rollout time limit (default 120)')
    .option('--list', 'list training runs (every algorithm)')
    .option(
      '--rewards <file>',
      'grpo, apo: score every rollout with this rewards config (default: .lightning/rewards.json beside the store, when it exists; see `lightning score`)',
    )
    .option(
      '--model <model>',
      'grpo, sft: "tiny" (built-in small policy, no download) or a Hugging Face model name or path',
    )
    .option('--from-config', 'grpo, sft, Hugging Face model: random weights from its config (no weights download)')
    .option('--lora', 'grpo, sft: train LoRA adapters (the default for Hugging Face models)')
    .option('--iterations <n>', 'grpo: training iterations (default 10)')
    .option('--samples <n>', 'grpo: rollouts per task per iteration, the group size (default 8)')
    .option('--tasks-per-iteration <n>', 'grpo: train tasks sampled per iteration (default: all)')
    .option(
      '--lr <rate>',
      'grpo: learning rate (default 3e-4); sft: default 1e-3 for tiny, 2e-4 for LoRA, 2e-5 for a full fine-tune',
    )
    .option(
      '--workers <n>',
      'grpo: agents at once (process mode) or agent workers (worker mode) (default 8); apo: agent workers per batch, --concurrency spread over them (worker mode; default 1)',
    )
    .addOption(
      new Option(
        '--agent-mode <mode>',
        'grpo, apo: process: the command once per rollout; worker: long-lived workers (LIGHTNING_RUNNER_URL) (default process; apo: worker when --workers is given)',
      ).choices(['process', 'worker']),
    )
    .option('--per-worker <n>', 'grpo, worker mode: rollouts one worker runs at once (default 16)')
    .option('--eval-every <n>', 'grpo: validate every n iterations (default 5)')
    .option(
      '--warm-start <file>',
      'grpo: supervised warm start first, on a chat JSONL file (lightning export --format chat)',
    )
    .option('--warm-start-steps <n>', 'grpo, warm start: at most this many steps (default 200)')
    .option(
      '--warm-start-until <accuracy>',
      'grpo, warm start: stop once this fraction of sampled completions matches the demonstrations',
    )
    .option(
      '--kl-coef <c>',
      'grpo: weight of the k3 KL to the reference policy (default 0; the KL is shown either way)',
    )
    .addOption(
      new Option('--loss-type <type>', "grpo: how token losses are averaged, TRL's names (default dapo)").choices([
        'grpo',
        'bnpo',
        'dr_grpo',
        'dapo',
      ]),
    )
    .option(
      '--max-response-length <n>',
      "grpo, --loss-type dr_grpo: the per-sequence divisor, TRL's max_completion_length (default: the largest max_tokens the iteration's calls asked for, at least the longest response)",
    )
    .option('--clip <eps>', 'grpo: PPO ratio clipping ε (default 0.2)')
    .option('--clip-high <eps>', "grpo: the upper ratio bound's ε, DAPO's clip-higher (e.g. 0.28; default: --clip)")
    .addOption(
      new Option(
        '--scale-rewards <how>',
        "grpo: group: advantages divided by the group's reward std (default); none: only the mean subtracted (Dr. GRPO)",
      ).choices(['group', 'none']),
    )
    .addOption(
      new Option(
        '--std <estimator>',
        "grpo: the group reward std --scale-rewards group divides by: sample (Bessel's correction, n − 1, as TRL; default) or population (n)",
      ).choices(['sample', 'population']),
    )
    .option(
      '--kl-bias-correction',
      "grpo: weight the KL term by the importance ratio π/π_behaviour (the default, as TRL's use_bias_correction_kl)",
    )
    .option('--no-kl-bias-correction', 'grpo: the plain k3 KL term')
    .addOption(
      new Option(
        '--zero-advantage <how>',
        'grpo: keep (default, as TRL): transitions with advantage 0 stay in the update (normaliser, KL, entropy); drop: left out',
      ).choices(['keep', 'drop']),
    )
    .addOption(
      new Option('--device <device>', 'grpo, sft: where the policy runs (default auto)').choices([
        'auto',
        'cpu',
        'cuda',
      ]),
    )
    .option('--python <path>', 'grpo, sft: the Python that runs the trainer (default: see `lightning doctor`)')
    .option(
      '--nproc-per-node <n>',
      'grpo: data-parallel updates on n processes of this machine (one per GPU) under torchrun; rank 0 serves and saves (README, "Scale out")',
    )
    .option(
      '--fsdp',
      'grpo, with --nproc-per-node: shard parameters, gradients and optimizer state across the ranks (FSDP2, torch ≥ 2.6) instead of a full replica per rank, for a model too large to train on one device; rank 0 serves a gathered copy',
    )
    .option(
      '--nnodes <m>',
      'grpo, with --nproc-per-node: m machines in all; start the others with the command this prints (needs --rdzv-endpoint)',
    )
    .option(
      '--rdzv-endpoint <host:port>',
      "grpo, with --nnodes: this machine's address and a free port, where the other nodes' ranks connect",
    )
    .option('--resume <run>', 'grpo, sft: continue a cancelled or failed run from its last checkpoint')
    .option(
      '--keep-checkpoints <all|n>',
      'grpo, sft: checkpoints kept besides the best by validation (grpo: reward, sft: loss): the last n (default 3), or all; optimizer state stays only in the newest',
    )
    .option(
      '--min-reward <r>',
      `sft: fine-tune on the rollouts whose episode reward is at least r (default ${DEFAULT_SFT_MIN_REWARD}: rated Good)`,
    )
    .option('--reward-name <name>', 'sft: the reward dimension read as the episode reward (default reward)')
    .option('--label <label>', 'sft: only rollouts with this label')
    .addOption(new Option('--mode <mode>', 'sft: only rollouts of this mode').choices(RolloutMode.options))
    .option(
      '--agent <regex>',
      'grpo, sft: train only the LLM calls of agents whose name matches (grpo: the policy still answers every call)',
    )
    .option(
      '--policy <name=regex>',
      "grpo, Hugging Face + LoRA: several policies, one LoRA adapter each on one base model (repeat the flag): each call goes to the first policy whose REGEX matches its agent's name (W3C baggage gen_ai.agent.name), else its requested model; calls matching none are answered by the base model and not trained",
      (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
    )
    .option(
      '--policy-reward <name=dimension>',
      "grpo, with --policy: this policy's episode reward is the rollout's reward of this name (the agent's POST /reward {name}, a rule's, a person's) instead of reward (repeatable)",
      (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
    )
    .option(
      '--val-fraction <f>',
      'sft: share of the rollouts held out to validate each epoch (loss, greedy exact match) (default 0.1; 0: none)',
    )
    .option('--epochs <n>', 'sft: passes over the rows, each ending with a validation and a checkpoint (default 3)')
    .option('--batch-size <n>', 'sft: rows per optimizer step (default 8)')
    .option('--resource <name>', 'apo: the prompt template resource to optimize (see `lightning resource put`)')
    .option('--beam <n>', 'apo: prompts kept after each round (default 2)')
    .option('--branch <n>', 'apo: new prompts per parent per round (default 2)')
    .option('--rounds <n>', 'apo: rounds (default 3)')
    .option(
      '--gradient-batch <n>',
      'apo: training rollouts per parent per round, the critique looks at them (default 4)',
    )
    .option('--val-batch <n>', 'apo: validation tasks each candidate is scored on per round (default 8)')
    .option('--critique-model <model>', 'apo: the model that writes critiques (default gpt-4o-mini)')
    .option('--edit-model <model>', 'apo: the model that rewrites the prompt (default gpt-4o-mini)')
    .option('--temperature <t>', 'apo: sampling temperature of the critique and edit models (default 1)')
    .option('--budget-calls <n>', 'apo: at most this many critique and edit calls (default 200)')
    .option('--budget-rollouts <n>', 'apo: at most this many agent rollouts (default 1000)')
    .option('--call-attempts <n>', 'apo: attempts per critique or edit before the branch is skipped (default 3)')
    .option('--concurrency <n>', 'apo: agents running at once (default 4)')
    .addOption(
      new Option(
        '--match <mode>',
        'apo, without a rewards file: reward the final answer against the expected answer (default normalized)',
      ).choices(['normalized', 'contains', 'none']),
    )
    .option(
      '--prompt-file <file>',
      'apo: the agent loads its prompt from this file: it seeds the resource, and each candidate runs in a temporary copy passed in place of this path (arguments, LIGHTNING_PROMPT_FILE)',
    )
    .option('--upstream <url>', 'apo: the upstream when the agents have no OPENAI_BASE_URL of their own')
    .passThroughOptions();
  addRayOptions(command).action(async (argv: string[], options: TrainFlags) => {
    if (options.list) return listRuns(options);
    checkFlags(options);
    switch (options.algorithm) {
      case 'apo':
        return runApoCommand(argv, options as ApoFlags);
      case 'sft':
        return runSftCommand(argv, options as SftFlags);
      case 'grpo':
        return runGrpoCommand(argv, options as GrpoFlags);
      default:
        return assertNever(options.algorithm);
    }
  });
}
