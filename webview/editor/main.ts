/**
 * The editor tabs' browser code (one entry of the webview build, beside the side panel's): a
 * rollout, a comparison of two rollouts, or a training run, as the extension says (`show`). It
 * speaks only to the extension, through protocol/ui/editorMessages.ts's messages (the extension validates what the
 * tab sends; the tab reads what it gets with ../pageInput, without zod), and keeps what it shows in
 * `setState`, which the extension's WebviewPanelSerializer reads back after a reload.
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-textfield/index.js';
import '@vscode-elements/elements/dist/vscode-single-select/index.js';
import '@vscode-elements/elements/dist/vscode-option/index.js';
import '../panel.css';
import './editor.css';
import type {
  EditorState,
  EditorToExtension,
  ExtensionToEditor,
} from '../../trainer-daemon/protocol/ui/editorMessages';
import { editorKey, readInitialMessages } from '../../trainer-daemon/protocol/ui/editorTarget';
import { extensionMessage } from '../pageInput';
import { RolloutTab } from './rolloutTab';
import { CompareTab } from './compareTab';
import { RunTab } from './runTab';
import { DEFAULT_SMOOTHING } from '../../trainer-daemon/protocol/ui/chartScale';

interface VsCodeApi {
  postMessage(message: EditorToExtension): void;
  getState(): unknown;
  setState(state: EditorState): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const post = (message: EditorToExtension): void => vscode.postMessage(message);
const root = document.getElementById('app')!;
root.classList.add('editor-app');
// The e2e reads these on the page's own clock: when the tab's script started, when its first spans came.
root.dataset.startedAt = String(Date.now());
// What the tab shows comes from the extension (`show`, first of its initial messages), also after a reload:
// the extension's serializer reads the saved state back (restoreEditorState) and says what to show.
let state: EditorState | undefined;
let view: RolloutTab | CompareTab | RunTab | undefined;

function save(change: Partial<EditorState>): void {
  if (!state) return;
  state = { ...state, ...change };
  vscode.setState(state);
  post({ type: 'state', state });
}

function show(next: EditorState): void {
  const shownAt = String(Date.now());
  const same = state && view && editorKey(state.target) === editorKey(next.target);
  state = next;
  vscode.setState(next);
  if (same) return;
  const target = next.target;
  switch (target.kind) {
    case 'rollout':
      view = new RolloutTab(
        target.rolloutId,
        next.selectedSpanId,
        {
          loadSpans: (rolloutId, afterSequence) => post({ type: 'loadSpans', rolloutId, afterSequence }),
          loadSpan: (rolloutId, sequence) => post({ type: 'loadSpan', rolloutId, sequence }),
          annotate: (rolloutId, spanId, value, comment) => {
            post({ type: 'annotate', rolloutId, spanId, value, comment });
            // Annotating keeps a preview tab, as editing does in VS Code.
            if (state?.preview) {
              save({ preview: false });
              post({ type: 'pin' });
            }
          },
          copy: (text) => post({ type: 'copy', text }),
          compareWith: (rolloutId) => post({ type: 'compareWith', rolloutId }),
          selectionChanged: (spanId) => state?.selectedSpanId !== spanId && save({ selectedSpanId: spanId }),
          painted: () => post({ type: 'painted' }),
          timelineResized: (height) => save({ timelineHeight: height }),
        },
        next.timelineHeight,
      );
      break;
    case 'compare':
      view = new CompareTab(target.left, target.right, {
        loadSpans: (rolloutId, afterSequence) => post({ type: 'loadSpans', rolloutId, afterSequence }),
        openRollout: (rolloutId) => post({ type: 'openRollout', rolloutId, beside: false }),
        painted: () => post({ type: 'painted' }),
      });
      break;
    case 'run':
      view = new RunTab(
        target.runId,
        next.overlayRunId,
        {
          loadRun: (runId, afterStep) =>
            post({ type: 'loadRun', runId, ...(afterStep === undefined ? {} : { afterStep }) }),
          listRuns: () => post({ type: 'listRuns' }),
          useCheckpoint: (checkpointId) => post({ type: 'useCheckpoint', checkpointId }),
          exportCheckpoint: (checkpointId) => post({ type: 'exportCheckpoint', checkpointId }),
          deleteCheckpoint: (checkpointId) => post({ type: 'deleteCheckpoint', checkpointId }),
          openIterationRollout: (runId, step, which) => post({ type: 'openIterationRollout', runId, step, which }),
          overlayChanged: (runId) => save({ overlayRunId: runId }),
          smoothingChanged: (weight) => save({ smoothing: weight }),
        },
        next.smoothing ?? DEFAULT_SMOOTHING,
      );
      break;
  }
  root.replaceChildren(view.element);
  root.dataset.kind = target.kind;
  // The e2e reads, per view, when the page was told to show it and when its first spans came.
  view.element.dataset.showAt = shownAt;
  // The e2e reads when the first paint happened on the page's own clock.
  requestAnimationFrame(() => (root.dataset.shownAt = String(performance.now())));
}

window.addEventListener('keydown', (event) => {
  if (view instanceof RolloutTab && view.onKey(event)) event.preventDefault();
});
window.addEventListener('dblclick', () => {
  if (state?.preview) {
    save({ preview: false });
    post({ type: 'pin' });
  }
});

window.addEventListener('message', (event: MessageEvent<unknown>) => receive(event.data));

function receive(data: unknown): void {
  const message = extensionMessage<ExtensionToEditor>(data);
  if (!message) return;
  if (message.type === 'show') return show(message.state);
  if (message.type === 'error') {
    const banner = document.createElement('div');
    banner.className = 'banner';
    banner.setAttribute('role', 'alert');
    banner.textContent = message.message;
    root.prepend(banner);
    setTimeout(() => banner.remove(), 10_000);
    return;
  }
  if (message.type === 'spans' && view) view.element.dataset.firstSpansAt ??= String(Date.now());
  if (view instanceof RolloutTab) {
    if (message.type === 'rollout') view.setRollout(message.rollout, message.node);
    else if (message.type === 'spans' && message.rolloutId === view.rolloutId)
      view.addSpans(message.spans, message.complete);
    else if (message.type === 'span') view.addWholeSpan(message.span);
    else if (message.type === 'spansAvailable' && message.rolloutId === view.rolloutId)
      view.spansAvailable(message.toSequence);
    else if (message.type === 'rewards' && message.rolloutId === view.rolloutId) view.setRewards(message.items);
  } else if (view instanceof CompareTab) {
    if (message.type === 'rollout') view.setRollout(message.rollout);
    else if (message.type === 'spans') view.addSpans(message.rolloutId, message.spans, message.complete);
    else if (message.type === 'spansAvailable') view.spansAvailable(message.rolloutId, message.toSequence);
    else if (message.type === 'rewards') view.setRewards(message.rolloutId, message.items);
  } else if (view instanceof RunTab) {
    if (message.type === 'runView') view.showView(message.view);
    else if (message.type === 'runChanged') view.runChanged(message.run);
    else if (message.type === 'runs') view.setRuns(message.items);
  }
}

// The first screen's messages, written into the page by the extension (extension/webviewHtml.ts): shown before any
// round trip.
for (const message of readInitialMessages(document.getElementById('initial-messages')?.textContent)) receive(message);
post({ type: 'ready' });
if (view instanceof CompareTab) view.flush();
