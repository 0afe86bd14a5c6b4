/**
 * Runs `lightning train --algorithm apo … --json` (the bundled CLI, on the daemon's runtime) as a
 * child process: its first stdout line names the run, its last one carries the result; stderr
 * lines are progress for people. The upstream key reaches it only through its environment.
 */
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import type { ApoResult } from '../../trainer-daemon/protocol';
import type { DaemonRuntime } from '../runtime';
import { parseTrainLine } from './trainArgs';

export interface TrainProcessOptions {
  readonly runtime: DaemonRuntime;
  readonly cliPath: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: NodeJS.ProcessEnv;
  /** The run exists: its id is what trainingRuns/cancel takes. */
  readonly onStarted: (runId: string) => void;
  readonly onProgress: (line: string) => void;
}

export interface TrainProcess {
  readonly result: Promise<ApoResult>;
  /** SIGINT: the CLI cancels its run and still prints the result so far. */
  interrupt(): void;
}

export function startTrainProcess(options: TrainProcessOptions): TrainProcess {
  const child = spawn(options.runtime.command, [options.cliPath, ...options.args], {
    cwd: options.cwd,
    env: { ...options.env, ...options.runtime.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderrTail: string[] = [];
  readline.createInterface({ input: child.stderr }).on('line', (line) => {
    stderrTail.push(line);
    if (stderrTail.length > 10) stderrTail.shift();
    options.onProgress(line.replace(/^apo: /, ''));
  });
  let result: ApoResult | undefined;
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const event = parseTrainLine(line);
    if (event?.event === 'training-started') options.onStarted(event.runId);
    if (event?.event === 'training-finished') result = event.result;
  });
  const finished = new Promise<ApoResult>((resolve, reject) => {
    child.once('error', (error) => reject(new Error(`cannot run ${options.runtime.command}: ${error.message}`)));
    child.once('close', (code, signal) => {
      if (result) resolve(result);
      else
        reject(
          new Error(
            `the training run stopped (${code ?? signal}) without a result: ${
              stderrTail
                .filter((line) => !line.startsWith('{'))
                .join(' ')
                .slice(-600) || 'no message'
            }`,
          ),
        );
    });
  });
  return { result: finished, interrupt: () => child.exitCode === null && child.kill('SIGINT') };
}
