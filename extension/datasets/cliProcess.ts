/**
 * Runs the bundled CLI (`dist/cli.js`) as a child process on the runtime the daemon uses
 * (runtime.ts), for commands whose logic lives in the CLI: `dataset import` (the file's parsing and
 * its line-numbered errors) and `dataset run` (the batch runner, which must outlive no one: the
 * child is stopped with SIGINT on cancel, and the CLI stops its agents and marks the rest cancelled).
 */
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import * as vscode from 'vscode';
import { resolveRuntimeFor } from '../runtime';
import { readSettings } from '../settings';

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  /** stderr without the CLI's JSON log lines. */
  readonly stderr: string;
}

export interface CliOptions {
  readonly cwd?: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Each stderr line as it comes (progress). */
  readonly onStderrLine?: (line: string) => void;
  /** Cancelling sends SIGINT (the CLI's Ctrl-C), then SIGKILL if it has not exited 10 s later. */
  readonly token?: vscode.CancellationToken;
}

export class LightningCli {
  constructor(
    private readonly cliPath: string,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  /** Runs `lightning ARGS` on the workspace's store. */
  async run(args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
    const settings = readSettings();
    const resolution = await resolveRuntimeFor(this.cliPath, settings.nodePath);
    if (!resolution.ok) throw new Error(resolution.message);
    const { runtime } = resolution;
    // `--store` goes before a `--`: what follows it is the agent's command line.
    const split = args.includes('--') ? args.indexOf('--') : args.length;
    const argv = [this.cliPath, ...args.slice(0, split), '--store', settings.storeFile, ...args.slice(split)];
    this.log.info(`[cli] lightning ${args.join(' ')}`);
    const child = spawn(runtime.command, argv, {
      cwd: options.cwd,
      env: { ...(options.env ?? process.env), ...runtime.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    const stderr: string[] = [];
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    readline.createInterface({ input: child.stderr }).on('line', (line) => {
      // JSON lines are the CLI's progress (`--progress json`) and its logs: the caller reads the first, the log keeps
      // both.
      if (line.startsWith('{')) this.log.debug(`[cli] ${line}`);
      else stderr.push(line);
      options.onStderrLine?.(line);
    });
    let killTimer: NodeJS.Timeout | undefined;
    const cancel = options.token?.onCancellationRequested(() => {
      child.kill('SIGINT');
      killTimer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      killTimer.unref();
    });
    try {
      const code = await new Promise<number | null>((resolve, reject) => {
        child.once('error', (error) => reject(new Error(`cannot run ${runtime.command}: ${error.message}`)));
        child.once('close', (exitCode) => resolve(exitCode));
      });
      return { code, stdout, stderr: stderr.join('\n') };
    } finally {
      cancel?.dispose();
      clearTimeout(killTimer);
    }
  }
}

/** The CLI's error line (`lightning: …`) without its prefix, else the last lines of stderr. */
export function cliError(run: CliRun): string {
  const line = run.stderr
    .split('\n')
    .reverse()
    .find((text) => text.startsWith('lightning: '));
  return line
    ? line.slice('lightning: '.length)
    : run.stderr.split('\n').slice(-5).join(' ').trim() || `exit code ${run.code}`;
}
