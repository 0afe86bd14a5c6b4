/**
 * `lightning run -- CMD ARGS…`: runs any agent command as one rollout. The command gets the instrumentation
 * environment, its stdio passes through (stderr's end is kept: a failed rollout's error carries its exception and last
 * lines), its exit code is ours, and the last line on stderr is
 * `{"event":"rollout-finished","id":…,"status":…,"reward":…}`. Uses the daemon that owns the store, or runs one inside
 * this process for the duration of the command.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import { Option, type Command } from 'commander';
import { instrumentationEnv, Json, RolloutMode, type Rollout, type RolloutStatus } from '../../protocol';
import { errorMessage, InvalidInputError } from '../../protocol/errors';
import { capturePreloads } from '../../capture/preloadFile';
import { envSecrets, failureText, OutputTail } from '../../protocol/failure';
import { isSecretVariable } from '../../protocol/secrets';
import { connectOrStartDaemon, type DaemonConnection } from '../../client/daemonConnection';
import { resolveStore, storeOption, type GlobalOptions } from '../options';
import { addCheckpointOptions, resolveRouting, type RoutingOptions } from '../callRouting';

interface RunOptions extends GlobalOptions, RoutingOptions {
  label?: string;
  task?: string;
  taskId?: string;
  mode: RolloutMode;
}

function parseTask(options: RunOptions): { id?: string; input: Json } | null {
  if (options.task === undefined && options.taskId === undefined) return null;
  let input: Json = null;
  if (options.task !== undefined) {
    try {
      input = Json.parse(JSON.parse(options.task));
    } catch (error) {
      throw new InvalidInputError(`--task: not valid JSON (${errorMessage(error)})`);
    }
  }
  return { ...(options.taskId ? { id: options.taskId } : {}), input };
}

function finalStatus(
  code: number | null,
  signal: NodeJS.Signals | null,
  interrupted: boolean,
): { to: RolloutStatus; error: string | null } {
  if (code === 0) return { to: 'succeeded', error: null };
  if (interrupted) return { to: 'cancelled', error: `stopped by ${signal ?? 'a signal'}` };
  if (signal) return { to: 'failed', error: `killed by ${signal}` };
  return { to: 'failed', error: `exited with code ${code}` };
}

export function registerRun(program: Command): void {
  const command = program
    .command('run')
    .description('run an agent command as one rollout: its LLM calls, tool spans and rewards are recorded')
    .argument('<command...>', 'the agent command and its arguments (after --)')
    .addOption(storeOption())
    .option('--label <text>', 'a label for the rollout (shown in lists)')
    .option('--task <json>', 'the task input, as JSON (given to the agent as LIGHTNING_TASK)')
    .option('--task-id <id>', 'the task id')
    .addOption(new Option('--mode <mode>', 'rollout mode').choices(RolloutMode.options).default('debug'))
    .option('--upstream <url>', "this rollout's upstream when the agent has no OPENAI_BASE_URL of its own")
    .option(
      '--token-ids',
      'ask the serving engine (e.g. vLLM) for exact token ids and logprobs on every call, for training',
    );
  addCheckpointOptions(command)
    .passThroughOptions()
    .action(async (argv: string[], options: RunOptions) => {
      const task = parseTask(options);
      const storeFile = resolveStore(options);
      let connection = await connectOrStartDaemon(storeFile);
      const { client } = connection;
      let report: (() => void) | undefined;
      try {
        const routing = await resolveRouting(client, options, process.env);
        const { rollout, url } = await client.request('startAgentRun', {
          mode: options.mode,
          label: options.label ?? null,
          task,
          source: { kind: 'command', argv, cwd: process.cwd() },
          ...routing,
        });
        const env = {
          ...process.env,
          ...instrumentationEnv({
            url,
            rolloutId: rollout.id,
            task: task?.input ?? null,
            base: process.env,
            ...capturePreloads(),
          }),
        };
        const outcome = await runChild(argv, env);
        const ended = outcome.spawnError
          ? { to: 'failed' as const, error: outcome.spawnError }
          : finalStatus(outcome.code, outcome.signal, outcome.interrupted);
        const final =
          ended.to === 'failed' && !outcome.spawnError
            ? {
                ...ended,
                error: failureText(ended.error ?? 'failed', outcome.stderr, envSecrets(env, isSecretVariable)),
              }
            : ended;
        // The daemon may have died and come back while the agent ran: finish through whichever serves the store now.
        if (connection.client.closed) connection = await reconnect(storeFile, connection);
        const finished = await connection.client.request('transitionRollout', {
          id: rollout.id,
          ...final,
          exitCode: outcome.code,
        });
        report = () => reportFinished(finished, outcome.spawnError);
        process.exitCode = outcome.code ?? 128 + (outcome.signal ? (os.constants.signals[outcome.signal] ?? 0) : 1);
      } finally {
        await connection.close();
      }
      // Last, so that the JSON line is the last line on stderr.
      report?.();
    });
}

/**
 * A new connection to the store's daemon after the old one was lost: a restarted daemon (the
 * editor's supervisor, another command), else one started here. Retries for ~10 s while a
 * restarting daemon comes up.
 */
async function reconnect(storeFile: string, lost: DaemonConnection): Promise<DaemonConnection> {
  await lost.close().catch(() => undefined);
  process.stderr.write('lightning: the daemon went away while the agent ran; reconnecting to finish the rollout\n');
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await connectOrStartDaemon(storeFile);
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

interface ChildOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  interrupted: boolean;
  spawnError?: string;
  /** The end of what it wrote to stderr. */
  stderr: string;
}

function runChild(argv: string[], env: NodeJS.ProcessEnv): Promise<ChildOutcome> {
  return new Promise((resolve) => {
    // stderr is piped through (and its end kept); stdin and stdout stay the terminal's.
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['inherit', 'inherit', 'pipe'], env });
    const tail = new OutputTail();
    child.stderr.on('data', (chunk: Buffer) => {
      process.stderr.write(chunk);
      tail.push(chunk);
    });
    let interrupted = false;
    const forward = (signal: NodeJS.Signals): void => {
      interrupted = true;
      child.kill(signal);
    };
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const done = (outcome: Omit<ChildOutcome, 'stderr'>): void => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve({ ...outcome, stderr: tail.text });
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      done({
        code: error.code === 'ENOENT' ? 127 : 126,
        signal: null,
        interrupted: false,
        spawnError: `cannot run ${argv[0]}: ${error.message}`,
      });
    });
    child.once('exit', (code, signal) => {
      // The rest of stderr, unless a process the agent left behind holds it open.
      const { stderr } = child;
      const read = stderr.readableEnded
        ? Promise.resolve()
        : new Promise((ended) => {
            stderr.once('end', ended);
            setTimeout(ended, 1_000).unref();
          });
      void read.then(() => done({ code, signal, interrupted }));
    });
  });
}

function reportFinished(rollout: Rollout, spawnError: string | undefined): void {
  if (spawnError) process.stderr.write(`lightning: ${spawnError}\n`);
  process.stderr.write(
    `${JSON.stringify({ event: 'rollout-finished', id: rollout.id, status: rollout.status, reward: rollout.reward })}\n`,
  );
}
