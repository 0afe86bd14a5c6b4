/**
 * `lightning train --algorithm grpo|apo … -- CMD`, `lightning train --algorithm sft …` and `lightning train --list`:
 * the commander wiring. The flags every algorithm reads are declared once; the flags only some algorithms read are
 * declared in groups by those algorithms, refused with the others (the error names the flag), and become each one's
 * configuration in its own module (trainGrpo.ts, trainApo.ts, trainSft.ts), which starts the run in the daemon and
 * follows it. Defaults are the configuration schemas' (protocol/training.ts, apo.ts).
 */
import fs from 'node:fs';
import { Option, type Command } from 'commander';
import { InvalidInputError, NotFoundError } from '../../protocol/errors';
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
import { rayOptions } from '../rayOptions';
import { runApoCommand, type ApoFlags } from './trainApo';
import { runGrpoCommand, type GrpoFlags } from './trainGrpo';
import { runSftCommand, type SftFlags } from './trainSft';

const ALGORITHMS: readonly TrainingAlgorithm[] = TrainingAlgorithm.options;

/** A flag only some algorithms read: the flag to name in an error, and those algorithms. */
interface OwnFlag {
  readonly flag: string;
  readonly for: readonly TrainingAlgorithm[];
}

/** Flags only `algorithms` read, declared on `command` and noted in `own` (by commander's key) for checkFlags. */
function addOwn(
  command: Command,
  own: Map<string, OwnFlag>,
  algorithms: readonly TrainingAlgorithm[],
  options: readonly Option[],
): void {
  for (const option of options) {
    // `--no-kl-bias-correction` shares its key with `--kl-bias-correction`: the error names the first.
    if (!own.has(option.attributeName())) own.set(option.attributeName(), { flag: option.long!, for: algorithms });
    command.addOption(option);
  }
}

/** A repeatable flag's values, in order. */
const repeated = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

type TrainFlags = GlobalOptions & { algorithm: TrainingAlgorithm; list?: boolean } & Partial<
    Omit<GrpoFlags, 'algorithm'>
  > &
  Partial<Omit<ApoFlags, 'algorithm'>> &
  Partial<Omit<SftFlags, 'algorithm'>>;

/** Refuses a flag another algorithm reads, naming it and the algorithms it is for. */
function checkFlags(options: TrainFlags, own: ReadonlyMap<string, OwnFlag>): void {
  for (const [key, { flag, for: algorithms }] of own) {
    if (algorithms.includes(options.algorithm) || options[key as keyof TrainFlags] === undefined) continue;
    throw new InvalidInputError(
      `${flag}: applies to --algorithm ${algorithms.join(' and ')} only (this run is --algorithm ${options.algorithm})`,
    );
  }
}

/**
 * `--resume RUN` continues the run with the configuration it was started with: a flag that would configure it, or an
 * agent command, is refused (it would be ignored), naming them.
 */
function checkResume(argv: readonly string[], options: TrainFlags, own: ReadonlyMap<string, OwnFlag>): void {
  if (options.resume === undefined) return;
  const configuring = [
    ...(options.dataset === undefined ? [] : ['--dataset']),
    ...(options.seed === undefined ? [] : ['--seed']),
    ...[...own]
      .filter(([key]) => key !== 'resume' && options[key as keyof TrainFlags] !== undefined)
      .map(([, { flag }]) => flag),
  ];
  if (configuring.length > 0 || argv.length > 0)
    throw new InvalidInputError(
      `--resume ${options.resume} continues that run with the configuration it started with: ${[...configuring, ...(argv.length > 0 ? ['an agent command'] : [])].join(', ')} would change nothing. Leave ${configuring.length + (argv.length > 0 ? 1 : 0) > 1 ? 'them' : 'it'} out, or start a new run with these settings`,
    );
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
  const storeFile = resolveStore(options);
  // A list reads: no store is no run, said so, not a new store with a daemon started on it.
  if (!fs.existsSync(storeFile))
    throw new NotFoundError(`no store at ${storeFile}: start one with \`lightning serve\` or pass --store FILE`);
  const { client, close } = await connectOrStartDaemon(storeFile);
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
    .option('--seed <n>', 'seeds every random choice (default 0)')
    .option('--list', 'list training runs (every algorithm)')
    .passThroughOptions();
  const own = new Map<string, OwnFlag>();
  addOwn(command, own, ['grpo', 'apo'], agentOptions());
  addOwn(command, own, ['grpo', 'sft'], policyOptions());
  addOwn(command, own, ['grpo'], [...grpoOptions(), ...rayOptions()]);
  addOwn(command, own, ['sft'], sftOptions());
  addOwn(command, own, ['apo'], apoOptions());
  command.action(async (argv: string[], options: TrainFlags) => {
    if (options.list) return listRuns(options);
    checkFlags(options, own);
    checkResume(argv, options, own);
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

/** Flags of the runs that start agents: grpo and apo. */
function agentOptions(): Option[] {
  return [
    new Option(
      '--val <name>',
      "grpo, apo: validation tasks (its val split, or all of it); default: the --dataset's val split",
    ),
    new Option('--timeout <seconds>', 'grpo, apo: per-rollout time limit (default 120)'),
    new Option(
      '--rewards <file>',
      'grpo, apo: score every rollout with this rewards config (default: .lightning/rewards.json beside the store, when it exists; see `lightning score`)',
    ),
    new Option(
      '--workers <n>',
      'grpo: agents at once (process mode) or agent workers (worker mode) (default 8); apo: agent workers per batch, --concurrency spread over them (worker mode; default 1)',
    ),
    new Option(
      '--agent-mode <mode>',
      'grpo, apo: process: the command once per rollout; worker: long-lived workers (LIGHTNING_RUNNER_URL) (default process; apo: worker when --workers is given)',
    ).choices(['process', 'worker']),
  ];
}

/** Flags of the runs that train a model's weights: grpo and sft. */
function policyOptions(): Option[] {
  return [
    new Option(
      '--model <model>',
      'grpo, sft: "tiny" (built-in small policy, no download) or a Hugging Face model name or path',
    ),
    new Option('--from-config', 'grpo, sft, Hugging Face model: random weights from its config (no weights download)'),
    new Option('--lora', 'grpo, sft: train LoRA adapters (the default for Hugging Face models)'),
    new Option(
      '--lr <rate>',
      'grpo: learning rate (default 3e-4); sft: default 1e-3 for tiny, 2e-4 for LoRA, 2e-5 for a full fine-tune',
    ),
    new Option('--device <device>', 'grpo, sft: where the policy runs (default auto)').choices(['auto', 'cpu', 'cuda']),
    new Option('--python <path>', 'grpo, sft: the Python that runs the trainer (default: see `lightning doctor`)'),
    new Option('--resume <run>', 'grpo, sft: continue a cancelled or failed run from its last checkpoint'),
    new Option(
      '--keep-checkpoints <all|n>',
      'grpo, sft: checkpoints kept besides the best by validation (grpo: reward, sft: loss): the last n (default 3), or all; optimizer state stays only in the newest',
    ),
    new Option(
      '--agent <regex>',
      'grpo, sft: train only the LLM calls of agents whose name matches (grpo: the policy still answers every call)',
    ),
  ];
}

function grpoOptions(): Option[] {
  return [
    new Option('--iterations <n>', 'grpo: training iterations (default 10)'),
    new Option('--samples <n>', 'grpo: rollouts per task per iteration, the group size (default 8)'),
    new Option('--tasks-per-iteration <n>', 'grpo: train tasks sampled per iteration (default: all)'),
    new Option('--per-worker <n>', 'grpo, worker mode: rollouts one worker runs at once (default 16)'),
    new Option('--eval-every <n>', 'grpo: validate every n iterations (default 5)'),
    new Option(
      '--warm-start <file>',
      'grpo: supervised warm start first, on a chat JSONL file (lightning export --format chat)',
    ),
    new Option('--warm-start-steps <n>', 'grpo, warm start: at most this many steps (default 200)'),
    new Option(
      '--warm-start-until <accuracy>',
      'grpo, warm start: stop once this fraction of sampled completions matches the demonstrations',
    ),
    new Option(
      '--kl-coef <c>',
      'grpo: weight of the k3 KL to the reference policy (default 0; the KL is shown either way)',
    ),
    new Option('--loss-type <type>', "grpo: how token losses are averaged, TRL's names (default dapo)").choices([
      'grpo',
      'bnpo',
      'dr_grpo',
      'dapo',
    ]),
    new Option(
      '--max-response-length <n>',
      "grpo, --loss-type dr_grpo: the per-sequence divisor, TRL's max_completion_length (default: the largest max_tokens the iteration's calls asked for, at least the longest response)",
    ),
    new Option('--clip <eps>', 'grpo: PPO ratio clipping ε (default 0.2)'),
    new Option('--clip-high <eps>', "grpo: the upper ratio bound's ε, DAPO's clip-higher (e.g. 0.28; default: --clip)"),
    new Option(
      '--scale-rewards <how>',
      "grpo: group: advantages divided by the group's reward std (default); none: only the mean subtracted (Dr. GRPO)",
    ).choices(['group', 'none']),
    new Option(
      '--std <estimator>',
      "grpo: the group reward std --scale-rewards group divides by: sample (Bessel's correction, n − 1, as TRL; default) or population (n)",
    ).choices(['sample', 'population']),
    new Option(
      '--kl-bias-correction',
      "grpo: weight the KL term by the importance ratio π/π_behaviour (the default, as TRL's use_bias_correction_kl)",
    ),
    new Option('--no-kl-bias-correction', 'grpo: the plain k3 KL term'),
    new Option(
      '--zero-advantage <how>',
      'grpo: keep (default, as TRL): transitions with advantage 0 stay in the update (normaliser, KL, entropy); drop: left out',
    ).choices(['keep', 'drop']),
    new Option(
      '--nproc-per-node <n>',
      'grpo: data-parallel updates on n processes of this machine (one per GPU) under torchrun; rank 0 serves and saves (docs/scale-out.md)',
    ),
    new Option(
      '--fsdp',
      'grpo, with --nproc-per-node: shard parameters, gradients and optimizer state across the ranks (FSDP2, torch ≥ 2.6) instead of a full replica per rank, for a model too large to train on one device; rank 0 serves a gathered copy',
    ),
    new Option(
      '--nnodes <m>',
      'grpo, with --nproc-per-node: m machines in all; start the others with the command this prints (needs --rdzv-endpoint)',
    ),
    new Option(
      '--rdzv-endpoint <host:port>',
      "grpo, with --nnodes: this machine's address and a free port, where the other nodes' ranks connect",
    ),
    new Option(
      '--policy <name=regex>',
      "grpo, Hugging Face + LoRA: several policies, one LoRA adapter each on one base model (repeat the flag): each call goes to the first policy whose REGEX matches its agent's name (W3C baggage gen_ai.agent.name), else its requested model; calls matching none are answered by the base model and not trained",
    ).argParser(repeated),
    new Option(
      '--policy-reward <name=dimension>',
      "grpo, with --policy: this policy's episode reward is the rollout's reward of this name (the agent's POST /reward {name}, a rule's, a person's) instead of reward (repeatable)",
    ).argParser(repeated),
  ];
}

function sftOptions(): Option[] {
  return [
    new Option(
      '--min-reward <r>',
      `sft: fine-tune on the rollouts whose episode reward is at least r (default ${DEFAULT_SFT_MIN_REWARD}: rated Good)`,
    ),
    new Option('--reward-name <name>', 'sft: the reward dimension read as the episode reward (default reward)'),
    new Option('--label <label>', 'sft: only rollouts with this label'),
    new Option('--mode <mode>', 'sft: only rollouts of this mode').choices(RolloutMode.options),
    new Option(
      '--val-fraction <f>',
      'sft: share of the rollouts held out to validate each epoch (loss, greedy exact match) (default 0.1; 0: none)',
    ),
    new Option('--epochs <n>', 'sft: passes over the rows, each ending with a validation and a checkpoint (default 3)'),
    new Option('--batch-size <n>', 'sft: rows per optimizer step (default 8)'),
  ];
}

function apoOptions(): Option[] {
  return [
    new Option('--resource <name>', 'apo: the prompt template resource to optimize (see `lightning resource put`)'),
    new Option('--beam <n>', 'apo: prompts kept after each round (default 2)'),
    new Option('--branch <n>', 'apo: new prompts per parent per round (default 2)'),
    new Option('--rounds <n>', 'apo: rounds (default 3)'),
    new Option(
      '--gradient-batch <n>',
      'apo: training rollouts per parent per round, the critique looks at them (default 4)',
    ),
    new Option('--val-batch <n>', 'apo: validation tasks each candidate is scored on per round (default 8)'),
    new Option('--critique-model <model>', 'apo: the model that writes critiques (default gpt-4o-mini)'),
    new Option('--edit-model <model>', 'apo: the model that rewrites the prompt (default gpt-4o-mini)'),
    new Option('--temperature <t>', 'apo: sampling temperature of the critique and edit models (default 1)'),
    new Option('--budget-calls <n>', 'apo: at most this many critique and edit calls (default 200)'),
    new Option('--budget-rollouts <n>', 'apo: at most this many agent rollouts (default 1000)'),
    new Option('--call-attempts <n>', 'apo: attempts per critique or edit before the branch is skipped (default 3)'),
    new Option('--concurrency <n>', 'apo: agents running at once (default 4)'),
    new Option(
      '--match <mode>',
      'apo, without a rewards file: reward the final answer against the expected answer (default normalized)',
    ).choices(['normalized', 'contains', 'none']),
    new Option(
      '--prompt-file <file>',
      'apo: the agent loads its prompt from this file: it seeds the resource, and each candidate runs in a temporary copy passed in place of this path (arguments, LIGHTNING_PROMPT_FILE)',
    ),
    new Option('--upstream <url>', 'apo: the upstream when the agents have no OPENAI_BASE_URL of their own'),
  ];
}
