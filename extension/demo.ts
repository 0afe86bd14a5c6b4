/**
 * **Lightning: Run the Offline Demo** (the Getting Started walkthrough's no-API-key, no-GPU path):
 * `lightning demo` in a terminal, in the first workspace folder, on the daemon's runtime. It
 * imports the built-in task and trains the sample agent with GRPO; the run shows in the panel.
 */
import * as vscode from 'vscode';
import { resolveRuntimeFor } from './runtime';
import { readSettings } from './settings';
import { EDITOR_ENV } from '../trainer-daemon/protocol/setupAdvice';

export async function runDemo(cliPath: string): Promise<void> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (!folder) {
    void vscode.window.showErrorMessage(
      'Lightning: the demo writes its store into a workspace folder; open a folder first (File > Open Folder…).',
    );
    return;
  }
  const resolution = await resolveRuntimeFor(cliPath, readSettings().nodePath);
  if (!resolution.ok) {
    void vscode.window.showErrorMessage(`Lightning: ${resolution.message}`);
    return;
  }
  const { runtime } = resolution;
  const terminal = vscode.window.createTerminal({
    name: 'Lightning demo',
    cwd: folder.uri,
    shellPath: runtime.command,
    shellArgs: [cliPath, 'demo'],
    env: { ...runtime.env, [EDITOR_ENV]: '1' },
  });
  terminal.show();
}
