/**
 * Starts the real daemon (the built `dist/cli.js serve`) as a child process on port 0 with a
 * temporary store, and reads its ready line, as the extension and `lightning run` do.
 */
import { spawn, type ChildProcess, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import path from 'node:path';
import type { ReadyMessage } from '../../trainer-daemon/protocol';
import type { StoreUpgrading } from '../../trainer-daemon/protocol/cliLines';
import { assertNever } from '../../trainer-daemon/protocol/assert';
import { awaitStartLine } from '../../extension/startLines';

export const REPO_ROOT = path.resolve(__dirname, '..', '..');
export const CLI = path.join(REPO_ROOT, 'dist', 'cli.js');

export interface RunningDaemon {
  readonly ready: ReadyMessage;
  /** The `store-upgrading` line serve printed before it was ready, if it upgraded the store. */
  readonly upgrade: StoreUpgrading | undefined;
  readonly process: ChildProcess;
  /** Everything the daemon wrote on stderr so far. */
  stderr(): string;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  readonly exited: Promise<number | string>;
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** `stdin: 'pipe'` keeps the daemon's stdin open, as the extension does (its lifeline with `--stop-when-alone`). */
export async function startDaemon(
  storeFile: string,
  extraArgs: string[] = [],
  env: NodeJS.ProcessEnv = {},
  stdin: 'ignore' | 'pipe' = 'ignore',
): Promise<RunningDaemon> {
  const child = spawn(process.execPath, [CLI, 'serve', '--store', storeFile, ...extraArgs], {
    stdio: [stdin, 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  }) as ChildProcessByStdio<Writable | null, Readable, Readable>;
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  let upgrade: StoreUpgrading | undefined;
  // Read as the extension's supervisor reads them (extension/startLines.ts), with shorter waits.
  const started = awaitStartLine(child.stdout, {
    readyMs: 10_000,
    upgradeMs: 120_000,
    onUpgrading: (line) => (upgrade = line),
  });
  const ready = await new Promise<ReadyMessage>((resolve, reject) => {
    void started.then((outcome) => {
      switch (outcome.kind) {
        case 'ready':
          return resolve(outcome.ready);
        // The daemon says why it could not start, then exits: report both.
        case 'failed':
          return void exited.then((code) =>
            reject(
              new Error(
                `daemon exited (${code}) before it was ready: ${outcome.failed.reason}: ${outcome.failed.message}; stderr:\n${stderr}`,
              ),
            ),
          );
        case 'unexpected':
          return reject(new Error(`bad ready line: ${outcome.line}`));
        case 'timeout':
          return reject(new Error(`daemon gave no ready line in ${outcome.seconds} s; stderr:\n${stderr}`));
        case 'closed':
          // After a startup-failed line, that line's rejection (also on exit) says more.
          return void exited.then((code) =>
            setImmediate(() => reject(new Error(`daemon exited (${code}) before it was ready; stderr:\n${stderr}`))),
          );
        default:
          return assertNever(outcome);
      }
    });
  });
  return {
    ready,
    upgrade,
    process: child,
    stderr: () => stderr,
    exited,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running `lightning ARGS…` (the built CLI): its output so far, and its result once it ends. */
export interface StartedCli {
  readonly child: ChildProcess;
  readonly output: { readonly stdout: string; readonly stderr: string };
  readonly done: Promise<CliResult>;
}

/** Starts `lightning ARGS…` (the built CLI); `output` grows as it writes. */
export function startCli(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): StartedCli {
  const child = spawn(process.execPath, [CLI, ...args], {
    cwd: options.cwd ?? REPO_ROOT,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output.stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output.stderr += chunk));
  const done = new Promise<CliResult>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, ...output }));
  });
  return { child, output, done };
}

/** Runs `lightning ARGS…` (the built CLI) to completion. */
export function runCli(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliResult> {
  return startCli(args, options).done;
}
