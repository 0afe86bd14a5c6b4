/**
 * One Lightning editor tab as the extension keeps it (its panel, what it shows, whether its page listens yet) and what
 * is said of any tab: a message posted to it (held until its page listens), the rollouts it shows, its title. Shared by
 * the tabs' owner (detailEditors.ts) and what feeds them from the daemon (tabFeed.ts).
 */
import type * as vscode from 'vscode';
import type { Rollout, TrainingRun } from '../../trainer-daemon/protocol';
import type { EditorState, EditorTarget, ExtensionToEditor } from '../../trainer-daemon/protocol/ui/editorMessages';
import { tabTitle } from '../../trainer-daemon/protocol/ui/editorTarget';

export interface Tab {
  readonly panel: vscode.WebviewPanel;
  state: EditorState;
  /** Bumped when the tab shows another target: a stream for the old one stops. */
  generation: number;
  /**
   * Whether the tab's script listens (it said `ready`). Until then messages wait here: a new tab's data is
   * fetched while its page loads, not after.
   */
  ready: boolean;
  readonly pending: ExtensionToEditor[];
  readonly disposables: vscode.Disposable[];
  /** When the extension was asked to show this target (epoch ms): the tab's timings in the log count from here. */
  openedAt: number;
  /** Whether the page painted what it shows now (its `painted`); until then `whenPainted` callers wait in `waiters`. */
  painted: boolean;
  readonly waiters: Array<() => void>;
  /** The rollouts it shows, as last read: its title names them. */
  readonly known: Map<string, Rollout>;
  /** A run tab's run, once read: its title names it. */
  run?: TrainingRun;
}

/**
 * Posts to the tab's page; until it listens (`ready`) a message waits in `pending` (a `show` is sent on `ready`
 * anyway).
 */
export function postTo(tab: Tab, message: ExtensionToEditor): void {
  if (tab.ready) void tab.panel.webview.postMessage(message);
  else if (message.type !== 'show') tab.pending.push(message);
}

/** The page painted what the tab shows: whoever waits for it (`whenPainted`) goes on. */
export function markPainted(tab: Tab): void {
  tab.painted = true;
  for (const resolve of tab.waiters.splice(0)) resolve();
}

/** The rollouts a tab shows (none for a run tab). */
export function rolloutIds(target: EditorTarget): string[] {
  switch (target.kind) {
    case 'rollout':
      return [target.rolloutId];
    case 'compare':
      return [target.left, target.right];
    case 'run':
      return [];
  }
}

/** A tab's title, naming the rollouts (or the run) it shows by what it has read of them. */
export function titleOf(tab: Tab): string {
  return tabTitle(tab.state, [...tab.known.values()], tab.run);
}
