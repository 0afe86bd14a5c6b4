/**
 * What both ends compute from an editor tab's target, without zod (the tab's bundle ships none): the
 * webview panel type, the key the one tab per target is found by, the tab's title, and the first
 * messages a new tab's page carries. The shapes are ./editorProtocol's.
 */
import { rolloutTitle } from '../format';
import type { Rollout } from '../../trainer-daemon/protocol/records';
import type { EditorState, EditorTarget, ExtensionToEditor } from './editorProtocol';

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

/** A tab's title: the rollout's, the pair, the run; a preview says so. */
export function tabTitle(state: EditorState, rollout?: Rollout): string {
  const target = state.target;
  const short = (id: string): string => (id.length > 14 ? `${id.slice(0, 12)}…` : id);
  switch (target.kind) {
    case 'rollout': {
      const title = rollout ? rolloutTitle(rollout) : `Rollout ${short(target.rolloutId)}`;
      const clipped = title.length > 40 ? `${title.slice(0, 39)}…` : title;
      return state.preview ? `${clipped} (preview)` : clipped;
    }
    case 'compare':
      return `Compare ${short(target.left)} ↔ ${short(target.right)}${state.preview ? ' (preview)' : ''}`;
    case 'run':
      return `Run ${short(target.runId)}`;
  }
}
