/**
 * The end of **Optimize This Prompt**: the best prompt against the original as a diff (two virtual
 * documents of the `lightning-prompt` scheme) titled with both validation scores, then **Apply**
 * (a WorkspaceEdit computed by promptEdit: the prompt written back where it was marked, re-escaped
 * for its literal, undoable) or **Keep as Resource Version** (resources/setCurrent).
 */
import * as vscode from 'vscode';
import { promptEdit, type ApoResult, type PromptLocation, type TrainingRun } from '../../trainer-daemon/protocol';
import { assertNever } from '../../trainer-daemon/protocol/assert';
import type { DaemonSupervisor } from '../supervisor';

export const PROMPT_SCHEME = 'lightning-prompt';

/** Where the original prompt was marked. */
export interface PromptSource {
  readonly uri: vscode.Uri;
  readonly location: PromptLocation;
}

const score = (value: number): string => value.toFixed(2);

export class PromptResults implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly texts = new Map<string, string>();
  /** Where each run started in this window marked its prompt (what Apply edits). */
  private readonly sources = new Map<string, PromptSource>();
  private readonly registration = vscode.workspace.registerTextDocumentContentProvider(PROMPT_SCHEME, this);

  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }

  private document(runId: string, which: string, resource: string, text: string): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: PROMPT_SCHEME, path: `/${runId}/${which}/${resource}.txt` });
    this.texts.set(uri.toString(), text);
    return uri;
  }

  remember(runId: string, source: PromptSource): void {
    this.sources.set(runId, source);
  }

  /** The panel's Show Diff for a finished run: Apply is offered when this window marked its prompt. */
  async showRun(run: TrainingRun): Promise<void> {
    switch (run.algorithm) {
      case 'apo':
        if (run.result === null)
          throw new Error(
            `training run ${run.id} has no prompt optimization result${run.status === 'running' ? ' yet' : ''}`,
          );
        return this.show(run.result);
      case 'grpo':
      case 'sft':
        throw new Error(`training run ${run.id} is a ${run.algorithm} run: it trains a model, not a prompt`);
      default:
        return assertNever(run);
    }
  }

  /**
   * Shows the diff and offers Apply (when the prompt's source is known) / Keep as Resource Version; resolves once the
   * user chose (or dismissed).
   */
  async show(result: ApoResult): Promise<void> {
    const source = this.sources.get(result.runId);
    const { seed, best, resource } = result;
    if (best.candidateId === seed.candidateId) {
      void vscode.window.showInformationMessage(
        `Lightning: no candidate beat the original prompt of "${resource}" (validation score ${score(seed.valScore)}, ${result.roundsCompleted} round(s), ${result.stopReason}).`,
      );
      return;
    }
    const original = this.document(result.runId, 'original', resource, seed.prompt);
    const optimized = this.document(result.runId, 'optimized', resource, best.prompt);
    const title = `${resource}: original (val ${score(seed.valScore)}) ↔ optimized (val ${score(best.valScore)})`;
    await vscode.commands.executeCommand('vscode.diff', original, optimized, title, { preview: false });
    const choice = await vscode.window.showInformationMessage(
      `Lightning: the optimized prompt scores ${score(best.valScore)} on validation, the original ${score(seed.valScore)} (run ${result.runId}).`,
      ...(source ? ['Apply'] : []),
      'Keep as Resource Version',
    );
    if (choice === 'Apply' && source) await this.apply(source, best.prompt);
    if (choice === 'Keep as Resource Version') await this.keep(resource, best.version);
  }

  /** Writes the prompt into the source where it was marked, as one undoable edit. */
  async apply(source: PromptSource, prompt: string): Promise<void> {
    const document = await vscode.workspace.openTextDocument(source.uri);
    const edit = promptEdit(document.getText(), source.location, prompt);
    const range = new vscode.Range(document.positionAt(edit.start), document.positionAt(edit.end));
    const workspaceEdit = new vscode.WorkspaceEdit();
    workspaceEdit.replace(source.uri, range, edit.newText);
    if (!(await vscode.workspace.applyEdit(workspaceEdit)))
      throw new Error(`the editor refused the edit to ${vscode.workspace.asRelativePath(source.uri)}`);
    const editor = await vscode.window.showTextDocument(document, { preview: false });
    editor.selection = new vscode.Selection(
      document.positionAt(edit.start),
      document.positionAt(edit.start + edit.newText.length),
    );
    editor.revealRange(editor.selection);
    this.log.info(`[apo] applied the optimized prompt to ${source.uri.fsPath}`);
    void vscode.window.showInformationMessage(
      `Lightning: applied the optimized prompt to ${vscode.workspace.asRelativePath(source.uri)} (undo with Ctrl+Z; save to keep).`,
    );
  }

  async keep(resource: string, version: number): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    await client.request('setCurrentResource', { name: resource, version });
    void vscode.window.showInformationMessage(
      `Lightning: "${resource}" version ${version} is now the current version agents get.`,
    );
  }

  dispose(): void {
    this.registration.dispose();
    this.texts.clear();
  }
}
