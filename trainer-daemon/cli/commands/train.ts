/**
 * `lightning train --algorithm grpo|apo … -- CMD` and `lightning train --list`: the commander wiring.
 * The flags every algorithm reads are declared once; each algorithm's own flags are refused with the
 * other one (the error names the flag), and become its configuration in its own module
 * (trainGrpo.ts, trainApo.ts). Defaults are the configuration schemas' (protocol/training.ts, apo.ts).
 */
import { Option, type Command } from 'commander';
import { InvalidInputError } from '../../protocol/errors';
import { placementOf, type TrainingRunSummary } from '../../protocol';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { table, time } from '../format';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';
import { addRayOptions } from '../rayOptions';
import { runApoCommand, type ApoFlags } from './trainApo';
import { runGrpoCommand, type GrpoFlags } from './trainGrpo';

type Algorithm = 'grpo' | 'apo';

/** Each algorithm's own options (commander's keys), with the flag to name in an error. */
const OWN: Record<Algorithm, Record<string, string>> = {
  grpo: {
    model: '--model',
    fromConfig: '--from-config',
    lora: '--lora',
    iterations: '--iterations',
    samples: '--samples',
    tasksPerIteration: '--tasks-per-iteration',
    lr: '--lr',
    workers: '--workers',
    agentMode: '--agent-mode',
    perWorker: '--per-worker',
    evalEvery: '--eval-every',
    warmStart: '--warm-start',
    warmStartSteps: '--warm-start-steps',
    warmStartUntil: '--warm-start-until',
    klCoef: '--kl-coef',
    lossType: '--loss-type',
    clip: '--clip',
    clipHigh: '--clip-high',
    scaleRewards: '--scale-rewards',
    device: '--device',
    python: '--python',
    resume: '--resume',
    klBiasCorrection: '--kl-bias-correction',
    zeroAdvantage: '--zero-advantage',
    nprocPerNode: '--nproc-per-node',
    fsdp: '--fsdp',
    nnodes: '--nnodes',
    rdzvEndpoint: '--rdzv-endpoint',
    ray: '--ray',
    rayPython: '--ray-python',
    rayWorkingDir: '--ray-working-dir',
    keepCheckpoints: '--keep-checkpoints',
  },
  apo: {
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
  },
};

type TrainFlags = GlobalOptions & { algorithm: Algorithm; list?: boolean } & Partial<Omit<GrpoFlags, 'algorithm'>> &
  Partial<Omit<ApoFlags, 'algorithm'>>;

/** Refuses a flag of the other algorithm, naming it. */
function checkFlags(options: TrainFlags): void {
  for (const algorithm of Object.keys(OWN) as Algorithm[]) {
    if (algorithm === options.algorithm) continue;
    const given = Object.keys(OWN[algorithm]).find((key) => options[key as keyof TrainFlags] !== undefined);
    if (given)
      throw new InvalidInputError(
        `${OWN[algorithm][given]}: applies to --algorithm ${algorithm} only (this run is --algorithm ${options.algorithm})`,
      );
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
        r.latest['reward/mean']?.toFixed(2) ?? '-',
        r.latest['val/reward']?.toFixed(2) ?? '-',
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
      'train an agent on a dataset: grpo (default) trains its model with reinforcement learning; apo optimizes a prompt template resource',
    )
    .argument(
      '[command...]',
      'the agent command (after --); it reads its task from LIGHTNING_TASK (grpo worker mode: takes rollouts from LIGHTNING_RUNNER_URL), its prompt from GET $LIGHTNING_URL/resources or LIGHTNING_RESOURCES',
    )
    .addOption(storeOption())
    .addOption(jsonOption())
    .addOption(new Option('--algorithm <name>', 'the training algorithm').choices(['grpo', 'apo']).default('grpo'))
    .option('--dataset <name>', "training tasks: the dataset's (name or id) train split (all of it when it has none)")
    .option('--val <name>', "validation tasks (its val split, or all of it); default: the --dataset's val split")
    .option('--seed <n>', 'seeds every random choice (default 0)')
    .option('--timeout <seconds>', 'per-rollout time limit (default 120)')
    .option('--list', 'list training runs (every algorithm)')
    .option(
      '--rewards <file>',
      'score every rollout with this rewards config (default: .lightning/rewards.json beside the store, when it exists; see `lightning score`)',
    )
    .option('--model <model>', 'grpo: "tiny" (built-in small policy, no download) or a Hugging Face model name or path')
    .option('--from-config', 'grpo, Hugging Face model: random weights from its config (no weights download)')
    .option('--lora', 'grpo: train LoRA adapters (the default for Hugging Face models)')
    .option('--iterations <n>', 'grpo: training iterations (default 10)')
    .option('--samples <n>', 'grpo: rollouts per task per iteration, the group size (default 8)')
    .option('--tasks-per-iteration <n>', 'grpo: train tasks sampled per iteration (default: all)')
    .option('--lr <rate>', 'grpo: learning rate (default 3e-4)')
    .option('--workers <n>', 'grpo: agents at once (process mode) or agent workers (worker mode) (default 8)')
    .addOption(
      new Option(
        '--agent-mode <mode>',
        'grpo: process: the command once per rollout; worker: long-lived workers (LIGHTNING_RUNNER_URL) (default process)',
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
    .option('--clip <eps>', 'grpo: PPO ratio clipping ε (default 0.2)')
    .option('--clip-high <eps>', "grpo: the upper ratio bound's ε, DAPO's clip-higher (e.g. 0.28; default: --clip)")
    .addOption(
      new Option(
        '--scale-rewards <how>',
        "grpo: group: advantages divided by the group's reward std (default); none: only the mean subtracted (Dr. GRPO)",
      ).choices(['group', 'none']),
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
      new Option('--device <device>', 'grpo: where the policy runs (default auto)').choices(['auto', 'cpu', 'cuda']),
    )
    .option('--python <path>', 'grpo: the Python that runs the trainer (default: see `lightning doctor`)')
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
    .option('--resume <run>', 'grpo: continue a cancelled or failed run from its last checkpoint')
    .option(
      '--keep-checkpoints <all|n>',
      'grpo: checkpoints kept besides the best by validation reward: the last n (default 3), or all; optimizer state stays only in the newest',
    )
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
    if (options.algorithm === 'apo') return runApoCommand(argv, options as ApoFlags);
    return runGrpoCommand(argv, options as GrpoFlags);
  });
}
