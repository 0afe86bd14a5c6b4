/** The `lightning` command line: a commander program with one module per command. */
import { Command, CommanderError } from 'commander';
import { errorMessage } from '../protocol/errors';
import { forReader } from '../protocol/setupAdvice';
import { VERSION } from '../version';
import { registerDataset } from './commands/dataset';
import { registerExport } from './commands/export';
import { registerReward } from './commands/reward';
import { registerRollouts } from './commands/rollouts';
import { registerRun } from './commands/run';
import { registerScore } from './commands/score';
import { registerServe } from './commands/serve';
import { registerShow } from './commands/show';
import { registerResource } from './commands/resource';
import { registerTrain } from './commands/train';
import { runDemo } from '../demo/main';
import { registerDoctor } from './commands/doctor';
import { registerCheckpoints } from './commands/checkpoints';
import { EXIT_CODES_HELP, ExitCode, exitCodeFor } from './exitCodes';

export function buildProgram(): Command {
  const program = new Command('lightning')
    .description('Lightning: record agent runs, annotate rewards and train agents with reinforcement learning')
    .version(VERSION)
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', EXIT_CODES_HELP)
    .enablePositionalOptions()
    .exitOverride();
  registerServe(program);
  registerRun(program);
  registerRollouts(program);
  registerShow(program);
  registerReward(program);
  registerExport(program);
  registerDataset(program);
  registerResource(program);
  registerTrain(program);
  registerScore(program);
  registerDoctor(program);
  registerCheckpoints(program);
  program
    .command('demo')
    .description(
      'train a sample tool-using agent with RL offline in .lightning/ (what `npm run demo` runs): no API key, no GPU, no download',
    )
    .action(() => runDemo());
  const all = (command: Command): Command[] => [command, ...command.commands.flatMap(all)];
  for (const command of all(program).slice(1)) command.exitOverride().addHelpText('after', EXIT_CODES_HELP);
  return program;
}

export async function main(argv: readonly string[]): Promise<number> {
  try {
    await buildProgram().parseAsync([...argv], { from: 'user' });
    // A command may set its own exit code (`lightning run` passes the agent's through).
    return typeof process.exitCode === 'number' ? process.exitCode : ExitCode.Ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander printed the message (or the help) already.
      return error.exitCode === 0 ? ExitCode.Ok : ExitCode.Usage;
    }
    process.stderr.write(`lightning: ${forReader(errorMessage(error), process.env)}\n`);
    return exitCodeFor(error);
  }
}
