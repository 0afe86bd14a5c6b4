/**
 * Pure helpers for Debug with Lightning: which launch configurations can be run, and how a
 * configuration gains the instrumentation environment. Kept free of `vscode` so they are unit-tested.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  instrumentationEnv,
  userUpstream,
  withNodeRequire,
  type AgentEnvInput,
  type AgentRun,
} from '../../trainer-daemon/protocol';

/** The properties of a debug configuration this module reads or writes. */
export interface LaunchConfig {
  readonly type: string;
  readonly name: string;
  readonly request: string;
  /** `"lightning": true` records the session as a rollout. */
  readonly lightning?: unknown;
  /** Set once the rollout exists, so child sessions (js-debug) and re-resolution never make a second one. */
  readonly lightningRolloutId?: unknown;
  readonly env?: unknown;
  readonly [key: string]: unknown;
}

/** Configurations Debug with Lightning offers: launches of a program (attach has no process to give an env to). */
export function runnableConfigurations(configurations: readonly LaunchConfig[]): LaunchConfig[] {
  return configurations.filter(
    (config) => typeof config.name === 'string' && typeof config.type === 'string' && config.request === 'launch',
  );
}

export function wantsLightning(config: LaunchConfig): boolean {
  return (
    config.lightning === true && typeof config.lightningRolloutId !== 'string' && config.__pendingTargetId === undefined
  );
}

/** The configuration's own `env` (string values only; null unsets a variable in VS Code's launch.json). */
export function configEnv(config: LaunchConfig): Record<string, string | undefined> {
  const env = config.env;
  if (env === null || typeof env !== 'object' || Array.isArray(env)) return {};
  return Object.fromEntries(
    Object.entries(env).map(([key, value]) => [key, typeof value === 'string' ? value : undefined]),
  );
}

/** A dotenv file's variables (`KEY=value`, `export KEY=value`, quoted values, `#` comments), as debuggers read it. */
export function parseEnvFile(body: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of body.split(/\r?\n/)) {
    const match = /^\s*(?:export\s+)?([\w.-]+)\s*=\s*(.*?)\s*$/.exec(line);
    if (!match || line.trim().startsWith('#')) continue;
    const raw = match[2]!;
    const quoted = /^(['"])(.*)\1$/.exec(raw);
    env[match[1]!] = quoted
      ? quoted[1] === '"'
        ? quoted[2]!.replace(/\\n/g, '\n')
        : quoted[2]!
      : raw.replace(/\s+#.*$/, '');
  }
  return env;
}

/**
 * The variables of the configuration's `envFile` (its variables already substituted: a relative path is the
 * configuration's `cwd`'s), or none when it has none or it cannot be read (the debugger then says why).
 */
export function configEnvFile(
  config: LaunchConfig,
  readFile: (file: string) => string = (file) => fs.readFileSync(file, 'utf8'),
): Record<string, string> {
  if (typeof config.envFile !== 'string' || config.envFile === '') return {};
  const file = typeof config.cwd === 'string' ? path.resolve(config.cwd, config.envFile) : config.envFile;
  try {
    return parseEnvFile(readFile(file));
  } catch {
    return {};
  }
}

/**
 * What the agent would have seen without Lightning: the editor's environment, the configuration's `envFile`, then its
 * `env` (the debuggers' order: js-debug reads the file as it launches, so its OPENAI_BASE_URL and key are read here
 * too). Its OPENAI_BASE_URL becomes the rollout's upstream (userUpstream).
 */
export function baseEnvironment(
  config: LaunchConfig,
  processEnv: Readonly<Record<string, string | undefined>>,
  readFile?: (file: string) => string,
): Record<string, string | undefined> {
  return { ...processEnv, ...configEnvFile(config, readFile), ...configEnv(config) };
}

export function upstreamFor(
  config: LaunchConfig,
  processEnv: Readonly<Record<string, string | undefined>>,
): string | null {
  return userUpstream(baseEnvironment(config, processEnv));
}

/** Debug types whose debuggee is a Node program (VS Code's JavaScript debugger). */
const NODE_TYPES = new Set(['node', 'pwa-node']);

/** Where a Node debuggee records its exit code (see exitCodeRecorder.ts): the preload and the file. */
export interface ExitCodeRecording {
  readonly recorder: string;
  readonly file: string;
}

/**
 * NODE_OPTIONS gains `--require <recorder>` (after the user's own options, or after `options` when given:
 * the capture preload's) for Node debug types.
 */
export function exitCodeEnv(
  config: LaunchConfig,
  recording: ExitCodeRecording,
  processEnv: Readonly<Record<string, string | undefined>>,
  options = baseEnvironment(config, processEnv).NODE_OPTIONS,
): Record<string, string> {
  if (!NODE_TYPES.has(config.type)) return {};
  return { NODE_OPTIONS: withNodeRequire(options, recording.recorder), LIGHTNING_EXIT_CODE_FILE: recording.file };
}

/**
 * The capture preloads (dist/capture-preload.js, trainer-daemon/python/lightning_capture): calls to providers' own
 * hosts go through the rollout.
 */
export type CapturePreloads = Pick<AgentEnvInput, 'nodePreload' | 'pythonSiteDir'>;

/** The configuration with the instrumentation variables added to its `env`; the user's other variables are kept. */
export function instrumentConfig(
  config: LaunchConfig,
  run: AgentRun,
  processEnv: Readonly<Record<string, string | undefined>>,
  recording?: ExitCodeRecording,
  capture: CapturePreloads = {},
): LaunchConfig {
  const base = baseEnvironment(config, processEnv);
  const instrumented = instrumentationEnv({
    url: run.url,
    rolloutId: run.rollout.id,
    task: run.rollout.task?.input ?? null,
    base,
    ...capture,
  });
  const added = {
    ...instrumented,
    ...(recording ? exitCodeEnv(config, recording, processEnv, instrumented.NODE_OPTIONS ?? base.NODE_OPTIONS) : {}),
  };
  const env = {
    ...(config.env !== null && typeof config.env === 'object' ? (config.env as Record<string, unknown>) : {}),
    ...added,
  };
  return { ...config, env, lightningRolloutId: run.rollout.id };
}

/** The capability key in a session's environment (`LIGHTNING_URL`, `…/r/<key>`), if it has one. */
export function rolloutKey(env: unknown): string | undefined {
  const url = env !== null && typeof env === 'object' ? (env as Record<string, unknown>).LIGHTNING_URL : undefined;
  return typeof url === 'string' ? /\/r\/([A-Za-z0-9_-]{32})\/?$/.exec(url)?.[1] : undefined;
}

/** A finished session's rollout status: the exit code when the debuggee reported one. */
export function finalStatus(exitCode: number | undefined): {
  to: 'succeeded' | 'failed' | 'cancelled';
  error: string | null;
} {
  if (exitCode === undefined)
    return {
      to: 'cancelled',
      error: 'the debug session ended before the program reported an exit code (stopped by the user?)',
    };
  if (exitCode === 0) return { to: 'succeeded', error: null };
  return { to: 'failed', error: `exited with code ${exitCode}` };
}
