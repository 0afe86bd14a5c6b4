/**
 * What both ends compute from an editor tab's target, without zod (the tab's bundle ships none): the
 * webview panel type, the key the one tab per target is found by, the tab's title, and the first
 * messages a new tab's page carries. The shapes are ./editorMessages.ts's.
 */
import { formatTime, rolloutTitle } from './rolloutText';
import type { Rollout } from '../records';
import type { TrainingRun } from '../training';
import { runTitle } from './trainingRunFormat';
import type { EditorState, EditorTarget, ExtensionToEditor } from './editorMessages';

/** The one webview panel type of every Lightning editor tab; the kind of tab is in its state. */
export const EDITOR_VIEW_TYPE = 'lightning.editor';

/** One tab per target: the key the extension finds an open tab by (a comparison of a and b is the one of b and a). */
export function editorKey(target: EditorTarget): string {
  switch (target.kind) {
    case 'rollout':
      return `rollout:${target.rolloutId}`;
    case 'compare':
      return `compare:${[target.left, target.right].sort().join(':')}`;
    case 'run':
      return `run:${target.runId}`;
  }
}

/**
 * The first messages a new tab's page carries (extension/webviewHtml.ts writes them into an inert
 * `<script type="application/json">`): JSON with every `<` escaped, so no string in a span can end that element.
 */
export function initialMessagesText(messages: readonly ExtensionToEditor[]): string {
  return JSON.stringify(messages).replace(/</g, '\\u003c');
}

/** The page's side: the messages read back (each then read as a posted one is), none when the text is not a list. */
export function readInitialMessages(text: string | null | undefined): unknown[] {
  if (!text) return [];
  try {
    const messages: unknown = JSON.parse(text);
    return Array.isArray(messages) ? messages : [];
  } catch {
    return [];
  }
}

/**
 * A tab's title: the rollout's, the pair's (by their labels, once known), the run's (by its label once known:
 * what it trains and when); a preview says so.
 */
export function tabTitle(state: EditorState, known?: Rollout | readonly Rollout[], run?: TrainingRun): string {
  const target = state.target;
  const rollouts: readonly Rollout[] = known === undefined ? [] : Array.isArray(known) ? known : [known as Rollout];
  const short = (id: string): string => (id.length > 14 ? `${id.slice(0, 12)}…` : id);
  const clip = (text: string, max: number): string => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
  switch (target.kind) {
    case 'rollout': {
      const rollout =
        known !== undefined && !Array.isArray(known)
          ? (known as Rollout)
          : rollouts.find((r) => r.id === target.rolloutId);
      const title = clip(rollout ? rolloutTitle(rollout) : `Rollout ${short(target.rolloutId)}`, 40);
      return state.preview ? `${title} (preview)` : title;
    }
    case 'compare': {
      const left = rollouts.find((r) => r.id === target.left);
      const right = rollouts.find((r) => r.id === target.right);
      let names = [
        left ? clip(rolloutTitle(left), 28) : short(target.left),
        right ? clip(rolloutTitle(right), 28) : short(target.right),
      ];
      // Two runs of one launch configuration share a label: their start times tell them apart.
      if (left && right && names[0] === names[1])
        names = [left, right].map((r, i) => `${names[i]} ${formatTime(r.createdAt)}`);
      return `Compare ${names.join(' ↔ ')}${state.preview ? ' (preview)' : ''}`;
    }
    case 'run':
      return run?.id === target.runId ? runTitle(run) : `Training run ${short(target.runId)}`;
  }
}
