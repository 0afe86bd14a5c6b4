/**
 * A launch configuration as a plain command line: how a training run starts the agent (many
 * times, in parallel, without the debugger). Node (`node`/`pwa-node`) and Python
 * (`python`/`debugpy`) launches are understood; the variables a training run can know
 * (`${workspaceFolder}`, `${env:NAME}`, `${userHome}`…) are substituted, others are refused by name.
 * Pure, so it is unit-tested.
 */
import { configEnv, type LaunchConfig } from '../debug/launchConfig';

export interface AgentCommand {
  readonly argv: readonly string[];
  readonly cwd: string;
  /** The configuration's own `env` (added to the training process's environment; undefined unsets). */
  readonly env: Readonly<Record<string, string | undefined>>;
}

export type AgentCommandResult = { readonly ok: true; readonly command: AgentCommand } | { readonly ok: false; readonly message: string };

export interface SubstitutionContext {
  readonly workspaceFolder: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly userHome: string;
}

class UnsupportedVariableError extends Error {}

function substitute(value: string, context: SubstitutionContext): string {
  return value.replace(/\$\{([^}]+)\}/g, (whole, name: string) => {
    if (name === 'workspaceFolder' || name === 'workspaceRoot' || name === 'cwd') return context.workspaceFolder;
    if (name === 'workspaceFolderBasename') return context.workspaceFolder.split(/[\\/]/).pop() ?? '';
    if (name === 'userHome') return context.userHome;
    if (name === 'pathSeparator' || name === '/') return '/';
    if (name.startsWith('env:')) return context.env[name.slice(4)] ?? '';
    throw new UnsupportedVariableError(`${whole} cannot be resolved outside a debug session`);
  });
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : typeof value === 'string' ? value.split(/\s+/).filter(Boolean) : []);

function argvOf(config: LaunchConfig): string[] | string {
  const program = typeof config.program === 'string' ? config.program : undefined;
  const args = strings(config.args);
  switch (config.type) {
    case 'node':
    case 'pwa-node': {
      if (!program) return 'it has no "program" to run';
      const runtime = typeof config.runtimeExecutable === 'string' ? config.runtimeExecutable : 'node';
      return [runtime, ...strings(config.runtimeArgs), program, ...args];
    }
    case 'python':
    case 'debugpy': {
      const python = typeof config.python === 'string' ? config.python : 'python3';
      if (typeof config.module === 'string') return [python, '-m', config.module, ...args];
      if (!program) return 'it has neither "program" nor "module"';
      return [python, program, ...args];
    }
    default:
      return `debug type "${config.type}" is not one Lightning can run as a command (node, python)`;
  }
}

/** The configuration's agent as a command, or why it cannot be one. */
export function agentCommand(config: LaunchConfig, context: SubstitutionContext): AgentCommandResult {
  const argv = argvOf(config);
  if (typeof argv === 'string') return { ok: false, message: `launch configuration "${config.name}": ${argv}` };
  try {
    const env = Object.fromEntries(Object.entries(configEnv(config)).map(([key, value]) => [key, value === undefined ? undefined : substitute(value, context)]));
    const cwd = typeof config.cwd === 'string' ? substitute(config.cwd, context) : context.workspaceFolder;
    return { ok: true, command: { argv: argv.map((arg) => substitute(arg, context)), cwd, env } };
  } catch (error) {
    if (error instanceof UnsupportedVariableError) return { ok: false, message: `launch configuration "${config.name}": ${error.message}` };
    throw error;
  }
}
