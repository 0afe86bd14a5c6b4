/**
 * The extension's entry point. Activation is lazy (see package.json `activationEvents`): it wires
 * services and registers commands, and does no other work at start-up.
 */
import * as vscode from 'vscode';

export function activate(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('Lightning', { log: true });
  context.subscriptions.push(log);
  context.subscriptions.push(vscode.commands.registerCommand('lightning.showLogs', () => log.show()));
  log.info(`[extension] Lightning ${String(context.extension.packageJSON.version)} activated`);
}

export function deactivate(): void {
  // Everything is disposed through context.subscriptions.
}
