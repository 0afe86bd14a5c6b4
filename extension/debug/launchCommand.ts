/**
 * The one converter from a launch configuration to a plain command line, used by **Run Dataset**,
 * **Start Training** and **Optimize This Prompt** (through `extension/pickers.ts`): its program,
 * arguments, working folder (relative to the workspace folder), `envFile` and `env` become the agent
 * command, run without the debugger. Node (`node`, `pwa-node`: `runtimeExecutable`, `runtimeArgs`,
 * `program`) and Python (`python`, `debugpy`: `python` or `pythonPath`, `program` or `module`)
 * launches are understood; anything else — an attach, another debugger, a variable that has a value
 * only inside a debug session (`${file}`, `${input:…}`, `${command:…}`) — is refused with a message
 * naming why, rather than guessed. No `vscode`, so it is unit-tested.
 */
import fs from 'node:fs';
import path from 'node:path';
import { configEnv, parseEnvFile, runnableConfigurations, type LaunchConfig } from './launchConfig';

export interface AgentCommand {
  readonly argv: readonly string[];
  readonly cwd: string;
  /** The configuration's `env` (undefined unsets a variable), laid over the editor's environment. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** What the command leaves out of the configuration (e.g. a preLaunchTask that is not run). */
  readonly notes: readonly string[];
}

export type CommandResult =
  { readonly ok: true; readonly command: AgentCommand } | { readonly ok: false; readonly message: string };

export interface CommandContext {
  readonly workspaceFolder: string;
  readonly home: string;
  readonly processEnv: Readonly<Record<string, string | undefined>>;
  /** Reads an `envFile` (default: from disk). */
  readonly readFile?: (file: string) => string;
}

const NODE_TYPES = new Set(['node', 'pwa-node']);
const PYTHON_TYPES = new Set(['python', 'debugpy']);

class NotConvertible extends Error {}

/**
 * `${workspaceFolder}` (and `${cwd}`, which is it for a command started from the editor),
 * `${workspaceFolderBasename}`, `${userHome}`, `${env:NAME}`, `${pathSeparator}`; any other variable is refused.
 */
export function substitute(text: string, context: CommandContext, field: string): string {
  return text.replace(/\$\{([^}]*)\}/g, (whole, name: string) => {
    if (name === 'workspaceFolder' || name === 'workspaceRoot' || name === 'cwd') return context.workspaceFolder;
    if (name === 'workspaceFolderBasename') return path.basename(context.workspaceFolder);
    if (name === 'userHome') return context.home;
    if (name === 'pathSeparator' || name === '/') return path.sep;
    if (name.startsWith('env:')) return context.processEnv[name.slice(4)] ?? '';
    throw new NotConvertible(
      `${field} uses ${whole}, which has a value only inside a debug session; replace it with a path or \${workspaceFolder}`,
    );
  });
}

function strings(value: unknown, field: string, context: CommandContext): string[] {
  if (value === undefined || value === null) return [];
  // A string `args` is a command line VS Code hands to a shell: split on spaces (quotes are not parsed).
  if (typeof value === 'string')
    return value.trim() === ''
      ? []
      : value
          .trim()
          .split(/\s+/)
          .map((part) => substitute(part, context, field));
  if (Array.isArray(value) && value.every((item) => typeof item === 'string'))
    return value.map((item) => substitute(item, context, field));
  throw new NotConvertible(`${field} must be a string or a list of strings`);
}

function text(value: unknown, field: string, context: CommandContext): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new NotConvertible(`${field} must be a string`);
  return substitute(value, context, field);
}

/** The agent command a launch configuration stands for, or why it cannot be made into one. */
export function launchToCommand(config: LaunchConfig, context: CommandContext): CommandResult {
  const name = `"${config.name}"`;
  if (config.request !== 'launch')
    return {
      ok: false,
      message: `${name} is an ${config.request} configuration: only a launch of a program can be run over a dataset`,
    };
  if (!NODE_TYPES.has(config.type) && !PYTHON_TYPES.has(config.type)) {
    return {
      ok: false,
      message: `${name} has debug type "${config.type}": Lightning runs node and python launch configurations as commands (or run \`lightning dataset run DATASET -- COMMAND\` in a terminal)`,
    };
  }
  try {
    const cwd = path.resolve(context.workspaceFolder, text(config.cwd, 'cwd', context) ?? context.workspaceFolder);
    // As the debuggers do: the envFile's variables, then `env` over them.
    const envFile = text(config.envFile, 'envFile', context);
    const env = {
      ...(envFile ? readEnvFile(path.resolve(context.workspaceFolder, envFile), context) : {}),
      ...Object.fromEntries(
        Object.entries(configEnv(config)).map(([key, value]) => [
          key,
          value === undefined ? undefined : substitute(value, context, `env.${key}`),
        ]),
      ),
    };
    const args = strings(config.args, 'args', context);
    const program = text(config.program, 'program', context);
    let argv: string[];
    if (NODE_TYPES.has(config.type)) {
      const runtimeArgs = strings(config.runtimeArgs, 'runtimeArgs', context);
      if (!program && runtimeArgs.length === 0)
        throw new NotConvertible('it has no "program" (or "runtimeArgs") to run');
      argv = [
        text(config.runtimeExecutable, 'runtimeExecutable', context) ?? 'node',
        ...runtimeArgs,
        ...(program ? [program] : []),
        ...args,
      ];
    } else {
      const module = text(config.module, 'module', context);
      if (!program && !module) throw new NotConvertible('it has neither "program" nor "module" to run');
      const python =
        text(config.python, 'python', context) ?? text(config.pythonPath, 'pythonPath', context) ?? 'python3';
      argv = [python, ...(module ? ['-m', module] : [program!]), ...args];
    }
    const notes =
      typeof config.preLaunchTask === 'string' ? [`its preLaunchTask "${config.preLaunchTask}" is not run`] : [];
    return { ok: true, command: { argv, cwd, env, notes } };
  } catch (error) {
    if (error instanceof NotConvertible)
      return { ok: false, message: `${name} cannot be run without the debugger: ${error.message}` };
    throw error;
  }
}

/** `KEY=VALUE` lines (`export ` and quotes allowed, `#` comments), as the Node and Python debuggers read them. */
function readEnvFile(file: string, context: CommandContext): Record<string, string> {
  try {
    return parseEnvFile((context.readFile ?? ((name) => fs.readFileSync(name, 'utf8')))(file));
  } catch (error) {
    throw new NotConvertible(
      `envFile ${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)}); fix the path or remove "envFile"`,
    );
  }
}

/** Each runnable configuration of a launch.json with its command, or why it has none: what the agent pickers offer. */
export function agentChoices(
  configurations: readonly LaunchConfig[],
  context: CommandContext,
): { readonly config: LaunchConfig; readonly result: CommandResult }[] {
  return runnableConfigurations(configurations).map((config) => ({ config, result: launchToCommand(config, context) }));
}

/** The editor's environment with the configuration's `env` laid over it (undefined unsets). */
export function commandEnvironment(
  command: AgentCommand,
  processEnv: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const merged: Record<string, string | undefined> = { ...processEnv, ...command.env };
  return Object.fromEntries(
    Object.entries(merged).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}
