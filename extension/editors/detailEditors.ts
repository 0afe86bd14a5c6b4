/**
 * Rollouts, comparisons and training runs in the editor area: webview panels of one type
 * (`lightning.editor`), one per target (a rollout, a pair, a run), found again by key. A click in
 * the side bar's list opens a preview tab, which the next click reuses; a double-click, "Open to
 * the Side", or annotating in it pins it. Each panel is fed from the daemon (the rollout, its
 * spans in pages, its rewards; the run's view) and live (rollouts, spans and runs changing). Tabs
 * survive a window reload: their state (webview `setState`) comes back to `deserializeWebviewPanel`.
 */
import * as vscode from 'vscode';
import type { Rollout, TrainingRun } from '../../trainer-daemon/protocol';
import { grpoIterationBatchId } from '../../trainer-daemon/protocol/training';
import {
  EditorToExtension,
  restoreEditorState,
  type EditorState,
  type EditorTarget,
  type ExtensionToEditor,
} from '../../trainer-daemon/protocol/ui/editorMessages';
import { EDITOR_VIEW_TYPE, editorKey, tabTitle } from '../../trainer-daemon/protocol/ui/editorTarget';
import { rolloutTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import type { Annotator } from '../annotate';
import type { LiveRollouts } from '../liveRollouts';
import type { TrainingRuns } from '../trainingRuns';
import { webviewHtml } from '../webviewHtml';
import { pickRollout, pickTrainingRun } from './rolloutPicks';
import { markPainted, postTo, rolloutIds, titleOf, type Tab } from './editorTab';
import { TabFeed } from './tabFeed';

/**
 * How long a new tab's page waits for its first data (the rollout, its rewards, its first spans) to be written
 * into the page itself: VS Code took 180–390 ms (e2e, this machine) from being given the page to starting the
 * frame that loads it, and a page that carries its first screen paints it as soon as its script runs, without
 * a round trip (which cost 0.1–0.5 s on a loaded machine).
 */
const FIRST_PAYLOAD_WAIT_MS = 200;

export interface OpenOptions {
  /** A preview tab: reused by the next preview. */
  readonly preview?: boolean;
  readonly beside?: boolean;
  /** Whether the tab takes the focus; by default a preview does not (the list keeps it, clicked through). */
  readonly focus?: boolean;
}

export class DetailEditors implements vscode.WebviewPanelSerializer, vscode.Disposable {
  private readonly tabs = new Set<Tab>();
  private readonly disposables: vscode.Disposable[] = [];
  private readonly dist: vscode.Uri;
  private readonly feed: TabFeed;
  private readonly _onDidChangeTabs = new vscode.EventEmitter<void>();
  /** A tab opened, closed or shows another target (the side panel shows a summary of what a tab shows). */
  readonly onDidChangeTabs = this._onDidChangeTabs.event;

  constructor(
    extensionUri: vscode.Uri,
    private readonly live: LiveRollouts,
    private readonly annotator: Annotator,
    private readonly trainingRuns: TrainingRuns,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.dist = vscode.Uri.joinPath(extensionUri, 'dist');
    this.feed = new TabFeed(live, log, (tab) => this.tabs.has(tab));
    this.disposables.push(
      vscode.window.registerWebviewPanelSerializer(EDITOR_VIEW_TYPE, this),
      live.onDidChangeRollouts((rollouts) => {
        for (const rollout of rollouts) {
          for (const tab of this.showing(rollout.id)) {
            postTo(tab, { type: 'rollout', rollout });
            void this.feed.sendRewards(tab, rollout.id);
            tab.known.set(rollout.id, rollout);
            tab.panel.title = titleOf(tab);
          }
        }
      }),
      live.onDidAddSpans((ranges) => {
        for (const range of ranges)
          for (const tab of this.showing(range.rolloutId))
            postTo(tab, { type: 'spansAvailable', rolloutId: range.rolloutId, toSequence: range.toSequence });
      }),
      trainingRuns.onDidChange((run) => {
        for (const tab of this.tabs) {
          if (tab.state.target.kind !== 'run') continue;
          postTo(tab, { type: 'runChanged', run });
          if (tab.state.target.runId === run.id) this.knowRun(tab, run);
        }
      }),
    );
  }

  /** Opens (or reveals) a rollout's tab; a preview reuses the preview rollout tab there is. */
  openRollout(rolloutId: string, options: OpenOptions = {}): void {
    this.open({ kind: 'rollout', rolloutId }, options);
  }

  /**
   * Two rollouts side by side, in a preview tab by default (as VS Code opens a diff): the next comparison
   * reuses the preview Compare tab there is, which skips a new webview's start-up (VS Code's own ~0.2–0.4 s).
   */
  compare(left: string, right: string, options: OpenOptions = { preview: true, focus: true }): void {
    if (left === right) throw new Error('pick two different rollouts to compare');
    this.open({ kind: 'compare', left, right }, options);
  }

  openRun(runId: string, options: OpenOptions = {}): void {
    this.open({ kind: 'run', runId }, options);
  }

  /**
   * One tab per target: an open one is revealed (and kept, unless this is a preview); a preview shows in the
   * open preview tab of the same kind when there is one; otherwise a new tab.
   */
  private open(target: EditorTarget, options: OpenOptions): void {
    const openedAt = Date.now();
    const keepFocus = !(options.focus ?? !options.preview);
    const open = this.find(target);
    if (open) {
      if (!options.preview) this.pin(open);
      open.panel.reveal(options.beside ? vscode.ViewColumn.Beside : open.panel.viewColumn, keepFocus);
      return;
    }
    const state: EditorState = { target, preview: options.preview ?? false, selectedSpanId: null, overlayRunId: null };
    const preview = options.preview
      ? [...this.tabs].find((tab) => tab.state.preview && tab.state.target.kind === target.kind)
      : undefined;
    if (preview) {
      preview.openedAt = openedAt;
      this.retarget(preview, state);
      preview.panel.reveal(preview.panel.viewColumn, keepFocus);
      return;
    }
    this.create(state, { ...options, focus: !keepFocus }, openedAt);
  }

  /** **Lightning: Open Rollout in Editor** (an id from a caller, else a quick pick). */
  async openRolloutCommand(argument: unknown): Promise<void> {
    const id =
      typeof argument === 'string'
        ? argument
        : (await pickRollout(await this.live.supervisor.ensureRunning(), 'Open which rollout?'))?.id;
    if (id) this.openRollout(id);
  }

  /** **Lightning: Compare Rollouts** (two ids from a caller, else two quick picks). */
  async compareCommand(argument: unknown): Promise<void> {
    if (Array.isArray(argument) && argument.length === 2 && argument.every((id) => typeof id === 'string'))
      return this.compare(argument[0] as string, argument[1] as string);
    const client = await this.live.supervisor.ensureRunning();
    const first = await pickRollout(client, 'Compare: the first rollout');
    if (!first) return;
    const second = await pickRollout(client, `Compare ${rolloutTitle(first)} with…`, first);
    if (second) this.compare(first.id, second.id);
  }

  /** **Lightning: Open Training Run** (an id, else a quick pick). */
  async openRunCommand(argument: unknown): Promise<void> {
    const id =
      typeof argument === 'string' ? argument : (await pickTrainingRun(await this.live.supervisor.ensureRunning()))?.id;
    if (id) this.openRun(id);
  }

  async deserializeWebviewPanel(panel: vscode.WebviewPanel, raw: unknown): Promise<void> {
    const restored = restoreEditorState(raw);
    if (!restored.ok) {
      this.log.warn(`[editors] a Lightning tab could not be restored: ${restored.error}`);
      panel.dispose();
      return;
    }
    this.attach(panel, restored.state, Date.now());
  }

  /**
   * Resolves once every tab that shows this rollout has painted it (or after `capMs`). The side panel's own
   * detail of a rollout just clicked waits for the tab the click opened: both would otherwise share the
   * editor's one renderer thread while the tab starts (measured in the e2e: it held the tab's first rows
   * back by more than a second).
   */
  async whenPainted(rolloutId: string, capMs = 3_000): Promise<void> {
    const starting = this.showing(rolloutId).filter((tab) => !tab.painted);
    if (starting.length === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(starting.map((tab) => new Promise<void>((resolve) => tab.waiters.push(resolve)))),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, capMs))),
    ]);
    clearTimeout(timer);
  }

  private find(target: EditorTarget): Tab | undefined {
    const key = editorKey(target);
    return [...this.tabs].find((tab) => editorKey(tab.state.target) === key);
  }

  /** Whether the rollout's own tab is open (its timeline and conversations are there). */
  hasRolloutTab(rolloutId: string): boolean {
    return [...this.tabs].some(
      (tab) => tab.state.target.kind === 'rollout' && tab.state.target.rolloutId === rolloutId,
    );
  }

  /** The tabs that show a rollout (its own tab, or a comparison with it). */
  private showing(rolloutId: string): Tab[] {
    return [...this.tabs].filter((tab) => rolloutIds(tab.state.target).includes(rolloutId));
  }

  private create(state: EditorState, options: OpenOptions, openedAt: number): void {
    const panel = vscode.window.createWebviewPanel(
      EDITOR_VIEW_TYPE,
      tabTitle(state),
      {
        viewColumn: options.beside ? vscode.ViewColumn.Beside : vscode.ViewColumn.Active,
        preserveFocus: !(options.focus ?? true),
      },
      { enableScripts: true, retainContextWhenHidden: true, enableFindWidget: true, localResourceRoots: [this.dist] },
    );
    this.attach(panel, state, openedAt, Date.now());
  }

  private attach(panel: vscode.WebviewPanel, state: EditorState, openedAt: number, panelAt = openedAt): void {
    panel.webview.options = { enableScripts: true, localResourceRoots: [this.dist] };
    panel.title = tabTitle(state);
    panel.iconPath = vscode.Uri.joinPath(this.dist, '..', 'media', 'lightning.svg');
    const tab: Tab = {
      panel,
      state,
      generation: 0,
      ready: false,
      pending: [],
      disposables: [],
      openedAt,
      painted: false,
      waiters: [],
      known: new Map(),
    };
    this.tabs.add(tab);
    this._onDidChangeTabs.fire();
    void this.setPage(tab, this.feed.load(tab), panelAt);
    tab.disposables.push(
      panel.webview.onDidReceiveMessage((message: unknown) => void this.receive(tab, message)),
      panel.onDidDispose(() => {
        this.tabs.delete(tab);
        markPainted(tab);
        for (const disposable of tab.disposables) disposable.dispose();
        this._onDidChangeTabs.fire();
      }),
    );
  }

  /**
   * The tab's page, carrying its first messages (what came within FIRST_PAYLOAD_WAIT_MS); the rest wait for its
   * `ready`.
   */
  private async setPage(tab: Tab, firstPayload: Promise<void>, panelAt: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      firstPayload,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, FIRST_PAYLOAD_WAIT_MS))),
    ]);
    clearTimeout(timer);
    if (!this.tabs.has(tab)) return;
    const initial: ExtensionToEditor[] = [{ type: 'show', state: tab.state }, ...tab.pending.splice(0)];
    // The extension's side of the tab's start (read by the page and the e2e): asked, panel made, page given.
    tab.panel.webview.html = webviewHtml(
      tab.panel.webview,
      this.dist,
      'editor',
      tabTitle(tab.state),
      { openedAt: tab.openedAt, panelAt, htmlAt: Date.now() },
      initial,
    );
  }

  private pin(tab: Tab): void {
    if (!tab.state.preview) return;
    tab.state = { ...tab.state, preview: false };
    tab.panel.title = titleOf(tab);
    postTo(tab, { type: 'show', state: tab.state });
  }

  /** A preview tab shows another rollout (or pair). */
  private retarget(tab: Tab, state: EditorState): void {
    tab.state = state;
    tab.painted = false;
    tab.generation += 1;
    tab.panel.title = titleOf(tab);
    postTo(tab, { type: 'show', state });
    void this.feed.load(tab);
    this._onDidChangeTabs.fire();
  }

  private async receive(tab: Tab, raw: unknown): Promise<void> {
    const parsed = EditorToExtension.safeParse(raw);
    if (!parsed.success) {
      this.log.warn(`[editors] ignored a malformed message from a tab: ${parsed.error.issues[0]?.message ?? ''}`);
      return;
    }
    const message = parsed.data;
    try {
      switch (message.type) {
        case 'ready': {
          // A page that was ready before has reloaded: it gets everything again.
          const reloaded = tab.ready;
          tab.ready = true;
          if (!reloaded)
            this.log.info(
              `[editors] ${editorKey(tab.state.target)}: its page listens ${Date.now() - tab.openedAt} ms after the open (${tab.pending.length} messages waited for it)`,
            );
          postTo(tab, { type: 'show', state: tab.state });
          for (const pending of tab.pending.splice(0)) postTo(tab, pending);
          if (reloaded) void this.feed.load(tab);
          return;
        }
        case 'painted':
          return markPainted(tab);
        case 'loadSpans':
          return this.feed.streamSpans(tab, message.rolloutId, message.afterSequence);
        case 'loadSpan': {
          const client = await this.live.supervisor.ensureRunning();
          const [span] = (
            await client.request('listSpans', {
              rolloutId: message.rolloutId,
              afterSequence: message.sequence - 1,
              limit: 1,
            })
          ).items;
          if (span) postTo(tab, { type: 'span', span });
          return;
        }
        case 'annotate':
          await this.annotator.add({
            rolloutId: message.rolloutId,
            spanId: message.spanId,
            value: message.value,
            comment: message.comment,
          });
          for (const shown of this.showing(message.rolloutId)) void this.feed.sendRewards(shown, message.rolloutId);
          return;
        case 'copy':
          await vscode.env.clipboard.writeText(message.text);
          void vscode.window.setStatusBarMessage('Lightning: copied', 2_000);
          return;
        case 'state':
          // The tab's own state, except its target and preview, which the extension decides.
          tab.state = { ...message.state, target: tab.state.target, preview: tab.state.preview };
          return;
        case 'pin':
          return this.pin(tab);
        case 'openRollout':
          return this.openRollout(message.rolloutId, { beside: message.beside });
        case 'compareWith': {
          const client = await this.live.supervisor.ensureRunning();
          const { rollout } = await client.request('getRollout', { id: message.rolloutId, spans: false });
          const other = await pickRollout(client, `Compare ${rolloutTitle(rollout)} with…`, rollout);
          if (other) this.compare(rollout.id, other.id);
          return;
        }
        case 'loadRun':
          return this.trainingRuns.receive(
            {
              type: 'openTrainingRun',
              id: message.runId,
              ...(message.afterStep === undefined ? {} : { afterStep: message.afterStep }),
            },
            (reply) => {
              if (reply.type !== 'trainingRunDetail') return;
              postTo(tab, { type: 'runView', view: reply.view });
              if (tab.state.target.kind === 'run' && tab.state.target.runId === reply.view.run.id)
                this.knowRun(tab, reply.view.run);
            },
          );
        case 'listRuns':
          return this.trainingRuns.receive(
            { type: 'listTrainingRuns' },
            (reply) => reply.type === 'trainingRuns' && postTo(tab, { type: 'runs', items: reply.items }),
          );
        case 'useCheckpoint':
          return this.trainingRuns.receive(
            { type: 'useCheckpoint', checkpointId: message.checkpointId },
            () => undefined,
          );
        case 'exportCheckpoint':
        case 'deleteCheckpoint':
          return this.trainingRuns.receive({ type: message.type, checkpointId: message.checkpointId }, () => undefined);
        case 'openIterationRollout':
          return this.openIterationRollout(message.runId, message.step, message.which);
      }
    } catch (error) {
      this.feed.fail(tab, message.type, error);
    }
  }

  /** A run tab read its run: its title says what the run trains and when, not its id. */
  private knowRun(tab: Tab, run: TrainingRun): void {
    tab.run = run;
    tab.panel.title = titleOf(tab);
  }

  /** The best or worst rollout (by reward) of a GRPO iteration's training batch, in its own tab beside. */
  private async openIterationRollout(runId: string, step: number, which: 'best' | 'worst'): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    const batchId = grpoIterationBatchId(runId, step);
    const rated: Rollout[] = [];
    let cursor: string | undefined;
    // Bounded: a batch is tasks × samples; 20 pages of 500 is far more than any run here makes.
    for (let page = 0; page < 20; page += 1) {
      const result = await client.request('listRollouts', {
        batchId,
        limit: 500,
        order: 'oldest',
        ...(cursor ? { cursor } : {}),
      });
      rated.push(...result.items.filter((rollout) => rollout.reward !== null));
      if (!result.nextCursor) break;
      cursor = result.nextCursor;
    }
    if (rated.length === 0) {
      void vscode.window.showInformationMessage(
        `Lightning: iteration ${step} of ${runId} has no rated rollouts (batch ${batchId}).`,
      );
      return;
    }
    const sorted = rated.sort((a, b) => b.reward! - a.reward! || a.createdAt - b.createdAt);
    this.openRollout((which === 'best' ? sorted[0] : sorted.at(-1))!.id, { beside: true });
  }

  dispose(): void {
    for (const disposable of this.disposables) disposable.dispose();
    for (const tab of [...this.tabs]) tab.panel.dispose();
    this._onDidChangeTabs.dispose();
  }
}
