/**
 * The extension's settings (package.json `contributes.configuration`) read in one place, and the
 * upstream API key kept in SecretStorage: it reaches the daemon only through its environment
 * (LIGHTNING_UPSTREAM_API_KEY), never a file, a setting or a log line.
 */
import * as vscode from 'vscode';
import { parseKeepCheckpoints, type KeepCheckpoints } from '../trainer-daemon/protocol/checkpoints';
import { resolveStoreFile } from './storePath';

export interface LightningSettings {
  readonly nodePath: string | undefined;
  /** Absolute store file. */
  readonly storeFile: string;
  readonly upstreamBaseUrl: string | undefined;
  readonly trainingModel: string | undefined;
  /**
   * `lightning.training.keepCheckpoints`: "all" or N (the runs Start Training starts); a bad value's message; absent:
   * the default.
   */
  readonly keepCheckpoints: KeepCheckpoints | { readonly error: string } | undefined;
}

const SECRET_KEY = 'lightning.upstreamApiKey';

export function readSettings(): LightningSettings {
  const config = vscode.workspace.getConfiguration('lightning');
  const text = (key: string): string | undefined => config.get<string>(key)?.trim() || undefined;
  return {
    nodePath: text('nodePath'),
    storeFile: resolveStoreFile(
      text('storePath'),
      vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
      process.env.HOME ?? '/',
    ),
    upstreamBaseUrl: text('upstreamBaseUrl'),
    trainingModel: text('trainingModel'),
    keepCheckpoints: keepCheckpoints(config.get<unknown>('training.keepCheckpoints')),
  };
}

function keepCheckpoints(value: unknown): LightningSettings['keepCheckpoints'] {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string' && typeof value !== 'number')
    return { error: 'keep-checkpoints must be "all" or a whole number ≥ 1' };
  return parseKeepCheckpoints(String(value));
}

/** Settings whose change needs a daemon restart. */
export function affectsDaemon(event: vscode.ConfigurationChangeEvent): boolean {
  return ['nodePath', 'storePath', 'upstreamBaseUrl'].some((key) => event.affectsConfiguration(`lightning.${key}`));
}

export class UpstreamKey {
  constructor(private readonly secrets: vscode.SecretStorage) {}

  readonly onDidChange = (listener: () => void): vscode.Disposable =>
    this.secrets.onDidChange((event) => event.key === SECRET_KEY && listener());

  get(): Thenable<string | undefined> {
    return this.secrets.get(SECRET_KEY);
  }

  /** **Lightning: Set Upstream API Key**: an empty answer deletes the stored key. */
  async prompt(): Promise<void> {
    const value = await vscode.window.showInputBox({
      title: 'Lightning: Upstream API Key',
      prompt:
        'The key the daemon sends to the upstream LLM API (stored in the editor’s secret storage; empty to remove it)',
      password: true,
      ignoreFocusOut: true,
    });
    if (value === undefined) return;
    if (value.trim() === '') {
      await this.secrets.delete(SECRET_KEY);
      void vscode.window.showInformationMessage('Lightning: upstream API key removed.');
    } else {
      await this.secrets.store(SECRET_KEY, value.trim());
      void vscode.window.showInformationMessage('Lightning: upstream API key stored in secret storage.');
    }
  }
}
