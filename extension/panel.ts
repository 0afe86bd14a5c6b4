/**
 * The **Lightning** side panel: a webview view in its own activity-bar container. The extension is the webview's only
 * peer: it answers the webview's requests (trainer-daemon/protocol/ui/panelMessages.ts) from the daemon and forwards
 * live changes. The page has a strict CSP with a nonce and may load only the bundle.
 */
import * as vscode from 'vscode';
import {
  ExtensionToWebview,
  WebviewToExtension,
  type RolloutFilter,
} from '../trainer-daemon/protocol/ui/panelMessages';
import type { ListRolloutsParams } from '../trainer-daemon/protocol';
import type { LiveRollouts } from './liveRollouts';
import type { Annotator } from './annotate';
import type { TrainingRuns } from './trainingRuns';
import { datasetRows, rolloutTransitions } from './datasets/panelData';
import { reviewReward } from './rewards/reviewReward';
import { errorMessage } from '../trainer-daemon/protocol/errors';
import { webviewHtml } from './webviewHtml';
import type { DetailEditors } from './editors/detailEditors';

export const PANEL_VIEW_ID = 'lightning.rollouts';
const PAGE_SIZE = 200;
/** Spans per message: a first page about a screenful renders at once while the rest is fetched in larger ones. */
const FIRST_SPAN_PAGE = 30;
const SPAN_PAGE = 500;

export class RolloutsPanel implements vscode.WebviewViewProvider, vscode.Disposable {
  private view: vscode.WebviewView | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly live: LiveRollouts,
    private readonly annotator: Annotator,
    private readonly log: vscode.LogOutputChannel,
    private readonly trainingRuns: TrainingRuns,
    private readonly editors: DetailEditors,
  ) {
    const supervisor = live.supervisor;
    this.disposables.push(
      supervisor.onDidChangeState((state) =>
        this.post({ type: 'daemonState', state: state.kind, message: state.kind === 'failed' ? state.message : null }),
      ),
      live.onDidChangeRollouts((rollouts) => {
        this.post({ type: 'rolloutsChanged', rollouts: [...rollouts] });
        const selected = live.selectedId;
        if (selected && rollouts.some((rollout) => rollout.id === selected)) void this.sendRewards(selected);
      }),
      live.onDidAddSpans((ranges) => {
        for (const range of ranges)
          if (range.rolloutId === live.selectedId)
            this.post({ type: 'spansAvailable', rolloutId: range.rolloutId, toSequence: range.toSequence });
      }),
      live.onDidRequestReveal((rollout) => this.post({ type: 'reveal', rollout })),
      trainingRuns.onDidChange((run) => this.post({ type: 'trainingRunChanged', run })),
      editors.onDidChangeTabs(() => this.tabsChanged()),
    );
  }

  /** The rollout whose summary the panel shows because its tab shows the steps. */
  private summarized: string | undefined;

  /** A tab opened for the selected rollout: the panel shows its summary; its tab closed: the steps again. */
  private tabsChanged(): void {
    const selected = this.live.selectedId;
    if (!this.summarized && selected && this.editors.hasRolloutTab(selected)) {
      this.summarized = selected;
      this.post({ type: 'rolloutInTab', rolloutId: selected, inTab: true });
      return;
    }
    const id = this.summarized;
    if (!id || this.editors.hasRolloutTab(id)) return;
    this.summarized = undefined;
    if (this.live.selectedId !== id) return;
    this.post({ type: 'rolloutInTab', rolloutId: id, inTab: false });
    void this.streamSpans(id, 0).catch((error: unknown) =>
      this.log.warn(`[panel] steps of ${id}: ${errorMessage(error)}`),
    );
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    view.webview.html = webviewHtml(view.webview, dist, 'webview', 'Lightning');
    view.onDidDispose(() => (this.view = undefined), undefined, this.disposables);
    view.webview.onDidReceiveMessage((raw: unknown) => void this.receive(raw), undefined, this.disposables);
  }

  private post(message: ExtensionToWebview): void {
    void this.view?.webview.postMessage(message);
  }

  private async receive(raw: unknown): Promise<void> {
    const parsed = WebviewToExtension.safeParse(raw);
    if (!parsed.success) {
      this.log.warn(`[panel] ignored a malformed message from the webview: ${parsed.error.issues[0]?.message ?? ''}`);
      return;
    }
    const message = parsed.data;
    try {
      switch (message.type) {
        case 'ready': {
          const state = this.live.supervisor.state;
          this.post({
            type: 'daemonState',
            state: state.kind,
            message: state.kind === 'failed' ? state.message : null,
          });
          await this.live.supervisor.ensureRunning();
          return;
        }
        case 'listRollouts': {
          const client = await this.live.supervisor.ensureRunning();
          const page = await client.request('listRollouts', {
            ...listParams(message.filter),
            limit: PAGE_SIZE,
            ...(message.cursor ? { cursor: message.cursor } : {}),
            ...(message.inBatch === undefined ? {} : { inBatch: message.inBatch }),
          });
          this.post({
            type: 'rolloutPage',
            requestId: message.requestId,
            items: page.items,
            nextCursor: page.nextCursor,
          });
          return;
        }
        case 'listGroups': {
          const client = await this.live.supervisor.ensureRunning();
          const { order: _order, ...filter } = listParams(message.filter);
          this.post({
            type: 'rolloutGroups',
            requestId: message.requestId,
            groups: await client.request('rolloutGroups', { ...filter, limit: message.limit }),
          });
          return;
        }
        case 'selectRollout':
          this.live.selectedId = message.id;
          void this.sendRewards(message.id);
          void this.sendServedBy(message.id);
          // The tab this click opened paints first; the panel's steps follow (the header is there already),
          // unless the tab shows them: then the panel keeps the summary (Show Here streams them after all).
          await this.editors.whenPainted(message.id);
          if (this.live.selectedId !== message.id) return;
          if (this.editors.hasRolloutTab(message.id)) {
            this.summarized = message.id;
            this.post({ type: 'rolloutInTab', rolloutId: message.id, inTab: true });
            return;
          }
          this.summarized = undefined;
          await this.streamSpans(message.id, 0);
          return;
        case 'loadSpans':
          await this.streamSpans(message.rolloutId, message.afterSequence);
          return;
        case 'annotate':
          await this.annotator.add({
            rolloutId: message.rolloutId,
            spanId: message.spanId,
            value: message.value,
            comment: message.comment,
          });
          return;
        case 'copy':
          await vscode.env.clipboard.writeText(message.text);
          void vscode.window.setStatusBarMessage('Lightning: copied', 2_000);
          return;
        case 'listTrainingRuns':
        case 'openTrainingRun':
        case 'cancelTrainingRun':
        case 'showTrainingRunResult':
        case 'resumeTrainingRun':
        case 'useCheckpoint':
        case 'exportCheckpoint':
        case 'deleteCheckpoint':
          await this.trainingRuns.receive(message, (reply) => this.post(reply));
          return;
        case 'listDatasets':
          return this.datasetsChanged();
        case 'loadTransitions':
          this.post({
            type: 'transitions',
            rolloutId: message.rolloutId,
            view: await rolloutTransitions(this.live.supervisor, message.rolloutId),
          });
          return;
        case 'reviewReward':
          return reviewReward(
            this.live.supervisor,
            this.annotator,
            message.rolloutId,
            message.rewardId,
            message.action,
          );
        case 'openRolloutTab':
          return this.editors.openRollout(message.id, {
            preview: message.mode === 'preview',
            beside: message.mode === 'beside',
          });
        case 'compareRollouts':
          return this.editors.compare(message.left, message.right);
        case 'openRunTab':
          return this.editors.openRun(message.id);
      }
    } catch (error) {
      const text = errorMessage(error);
      this.log.error(`[panel] ${message.type} failed: ${text}`);
      this.post({ type: 'error', message: text });
    }
  }

  /**
   * Sends a rollout's spans after `afterSequence` page by page, so that a long trajectory shows its
   * first steps at once; stops when the user selects another rollout.
   */
  private async streamSpans(rolloutId: string, afterSequence: number): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    for (let after = afterSequence, limit = FIRST_SPAN_PAGE; this.live.selectedId === rolloutId; limit = SPAN_PAGE) {
      const { items } = await client.request('listSpans', { rolloutId, afterSequence: after, limit });
      const complete = items.length < limit;
      this.post({ type: 'spans', rolloutId, spans: items, complete });
      if (complete) return;
      after = items.at(-1)!.sequence;
    }
  }

  private async sendRewards(rolloutId: string): Promise<void> {
    try {
      const client = await this.live.supervisor.ensureRunning();
      const { items } = await client.request('listRewards', { rolloutId });
      this.post({ type: 'rewards', rolloutId, items });
    } catch (error) {
      this.log.warn(`[panel] cannot refresh rewards: ${errorMessage(error)}`);
    }
  }

  /**
   * Which policy (training iteration or checkpoint) answered the rollout's LLM calls, and where it ran, for its header.
   */
  private async sendServedBy(rolloutId: string): Promise<void> {
    try {
      const client = await this.live.supervisor.ensureRunning();
      const { servedBy, attempts } = await client.request('getRollout', { id: rolloutId, spans: false });
      const node = attempts.at(-1)?.node;
      this.post({ type: 'servedBy', rolloutId, policy: servedBy, ...(node ? { node } : {}) });
    } catch (error) {
      this.log.warn(`[panel] cannot read which policy served ${rolloutId}: ${errorMessage(error)}`);
    }
  }

  /** A dataset was imported: the Datasets section refreshes. */
  async datasetsChanged(): Promise<void> {
    this.post({ type: 'datasets', items: await datasetRows(this.live.supervisor) });
  }

  /** Reveals the panel with this training run open (Start Training, Resume Training). */
  async revealRun(runId: string): Promise<void> {
    await vscode.commands.executeCommand(`${PANEL_VIEW_ID}.focus`);
    this.post({ type: 'showTrainingRun', id: runId });
  }

  /** Shows one batch's rollouts (Run Dataset). */
  showBatch(batchId: string): void {
    this.post({ type: 'showBatch', batchId });
  }

  dispose(): void {
    for (const disposable of this.disposables) disposable.dispose();
  }
}

function listParams(filter: RolloutFilter): ListRolloutsParams {
  return {
    order: 'newest',
    ...(filter.status ? { status: [filter.status] } : {}),
    ...(filter.mode ? { mode: filter.mode } : {}),
    ...(filter.search ? { search: filter.search } : {}),
    ...(filter.datasetId ? { datasetId: filter.datasetId } : {}),
    ...(filter.batchId ? { batchId: filter.batchId } : {}),
  };
}
