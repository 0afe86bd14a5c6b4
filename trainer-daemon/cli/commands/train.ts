/**
 * `lightning train --algorithm apo … -- CMD`: the commander wiring only; each algorithm's flags
 * become its configuration in its own module (APO: trainApo.ts).
 */
import { Option, type Command } from 'commander';
import { jsonOption, storeOption } from '../options';
import { runApoCommand, type ApoFlags } from './trainApo';

export function registerTrain(program: Command): void {
  program
    .command('train')
    .description('train an agent on a dataset; apo: optimize a prompt template resource (Automatic Prompt Optimization)')
    .argument('<command...>', 'the agent command (after --); it reads its prompt from GET $LIGHTNING_URL/resources or LIGHTNING_RESOURCES')
    .addOption(storeOption())
    .addOption(jsonOption())
    .addOption(new Option('--algorithm <name>', 'the training algorithm').choices(['apo']).makeOptionMandatory())
    .option('--resource <name>', 'apo: the prompt template resource to optimize (see `lightning resource put`)')
    .option('--dataset <name>', "training tasks: the dataset's train split (all of it when it has none)")
    .option('--val <name>', "validation tasks (its val split, or all of it); default: the --dataset's val split")
    .option('--beam <n>', 'apo: prompts kept after each round', '2')
    .option('--branch <n>', 'apo: new prompts per parent per round', '2')
    .option('--rounds <n>', 'apo: rounds', '3')
    .option('--gradient-batch <n>', 'apo: training rollouts per parent per round (the critique looks at them)', '4')
    .option('--val-batch <n>', 'apo: validation tasks each candidate is scored on per round', '8')
    .option('--critique-model <model>', 'apo: the model that writes critiques', 'gpt-4o-mini')
    .option('--edit-model <model>', 'apo: the model that rewrites the prompt', 'gpt-4o-mini')
    .option('--temperature <t>', 'apo: sampling temperature of the critique and edit models', '1')
    .option('--budget-calls <n>', 'apo: at most this many critique and edit calls', '200')
    .option('--budget-rollouts <n>', 'at most this many agent rollouts', '1000')
    .option('--seed <n>', 'seeds every random choice (same seed, same rewards: same run)', '0')
    .option('--call-attempts <n>', 'apo: attempts per critique or edit before the branch is skipped', '3')
    .option('--concurrency <n>', 'agents running at once', '4')
    .option('--timeout <seconds>', 'per-rollout time limit', '120')
    .addOption(new Option('--match <mode>', 'reward from the expected answer when none was given').choices(['normalized', 'contains', 'none']).default('normalized'))
    .option('--prompt-file <file>', 'apo: the agent loads its prompt from this file: it seeds the resource, and each candidate runs in a temporary copy passed in place of this path (arguments, LIGHTNING_PROMPT_FILE)')
    .option('--upstream <url>', 'the upstream when the agents have no OPENAI_BASE_URL of their own')
    .passThroughOptions()
    .action((argv: string[], options: ApoFlags) => runApoCommand(argv, options));
}
