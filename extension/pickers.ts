/**
 * The quick picks the training and dataset commands share — **Run Dataset**, **Start Training** and
 * **Optimize This Prompt** ask for a dataset and an agent the same way: the one last chosen first, and
 * every launch configuration with the command the one converter (`debug/launchCommand.ts`) makes of it,
 * or why it has none (a choice that cannot run says so and the list comes back).
 */
import os from 'node:os';
import * as vscode from 'vscode';
import { agentChoices, type AgentCommand, type CommandContext, type CommandResult } from './debug/launchCommand';
import type { LaunchConfig } from './debug/launchConfig';

export type AgentChoice = { readonly config: LaunchConfig; readonly result: CommandResult };

export interface PickOptions {
  readonly title: string;
  readonly placeHolder?: string;
  /** Where the last choice is remembered (its name), to offer it first next time. */
  readonly memory: vscode.Memento;
  readonly memoryKey: string;
}

/**
 * What the commands substitute launch.json variables with: the first workspace folder, the home folder, the editor's
 * environment.
 */
export function commandContext(folder = vscode.workspace.workspaceFolders?.[0]): CommandContext {
  return { workspaceFolder: folder?.uri.fsPath ?? process.cwd(), home: os.homedir(), processEnv: process.env };
}

/** The workspace's launch configurations, each with its command or why it has none. */
export function launchAgentChoices(folder = vscode.workspace.workspaceFolders?.[0]): AgentChoice[] {
  return agentChoices(
    vscode.workspace.getConfiguration('launch', folder?.uri).get<LaunchConfig[]>('configurations') ?? [],
    commandContext(folder),
  );
}

function lastFirst<T>(items: readonly T[], name: (item: T) => string, last: string | undefined): T[] {
  return [...items].sort((a, b) => Number(name(b) === last) - Number(name(a) === last));
}

/** The agent: the launch configuration's name and its command; undefined when the person cancels. */
export async function pickAgent(
  choices: readonly AgentChoice[],
  options: PickOptions,
): Promise<{ readonly name: string; readonly command: AgentCommand } | undefined> {
  const items = lastFirst(choices, (c) => c.config.name, options.memory.get<string>(options.memoryKey)).map(
    ({ config, result }) => ({
      label: result.ok ? config.name : `$(warning) ${config.name}`,
      description: result.ok ? result.command.argv.join(' ') : 'cannot run without the debugger',
      detail: result.ok ? undefined : result.message,
      value: { name: config.name, result },
    }),
  );
  for (;;) {
    const chosen = (
      await vscode.window.showQuickPick(items, {
        title: options.title,
        placeHolder: options.placeHolder,
        ignoreFocusOut: true,
        matchOnDescription: true,
      })
    )?.value;
    if (!chosen) return undefined;
    if (chosen.result.ok) {
      await options.memory.update(options.memoryKey, chosen.name);
      return { name: chosen.name, command: chosen.result.command };
    }
    await vscode.window.showErrorMessage(`Lightning: ${chosen.result.message}`, { modal: true });
  }
}

/** One of `items` (datasets, dataset rows) by name; undefined when the person cancels. */
export async function pickNamed<T>(
  items: readonly T[],
  name: (item: T) => string,
  describe: (item: T) => { readonly description?: string; readonly detail?: string },
  options: PickOptions,
): Promise<T | undefined> {
  const picks = lastFirst(items, name, options.memory.get<string>(options.memoryKey)).map((item) => ({
    label: name(item),
    ...describe(item),
    item,
  }));
  const chosen = await vscode.window.showQuickPick(picks, {
    title: options.title,
    placeHolder: options.placeHolder,
    ignoreFocusOut: true,
    matchOnDescription: true,
  });
  if (chosen) await options.memory.update(options.memoryKey, chosen.label);
  return chosen?.item;
}
