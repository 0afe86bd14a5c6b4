/**
 * The side panel's browser code: filters, the live rollout list and the selected rollout's
 * trajectory. It speaks only to the extension, through ./protocol's messages (the extension validates what
 * the page sends; the page reads what it gets with ./pageInput, without zod); its filters and selection
 * survive the view being hidden (getState/setState).
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-textfield/index.js';
import '@vscode-elements/elements/dist/vscode-single-select/index.js';
import '@vscode-elements/elements/dist/vscode-option/index.js';
import '@vscode-elements/elements/dist/vscode-badge/index.js';
import './panel.css';
import type { Rollout } from '../trainer-daemon/protocol/records';
import { ROLLOUT_MODES, ROLLOUT_STATUSES } from '../trainer-daemon/protocol/rolloutValues';
import type { ExtensionToWebview, RolloutFilter, WebviewToExtension } from './protocol';
import { extensionMessage, rolloutFilter } from './pageInput';
import { RolloutList } from './rolloutList';
import { TrajectoryView } from './trajectory';
import { TrainingRunsView } from './trainingRuns';
import { DatasetsSection } from './datasets';

interface PanelState {
  filter: RolloutFilter;
  selectedId?: string;
}

interface VsCodeApi {
  postMessage(message: WebviewToExtension): void;
  getState(): unknown;
  setState(state: PanelState): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const saved = vscode.getState() as Partial<PanelState> | undefined;
const state: PanelState = { filter: rolloutFilter(saved?.filter ?? {}) ?? {}, selectedId: saved?.selectedId };
const post = (message: WebviewToExtension): void => vscode.postMessage(message);
const save = (): void => vscode.setState(state);

const app = document.getElementById('app')!;
app.innerHTML = `<div class="toolbar"><vscode-badge class="daemon-state">starting</vscode-badge><span class="count"></span><vscode-button class="compare" secondary hidden aria-label="Compare the two marked rollouts (Space or Ctrl+click marks one)">Compare</vscode-button></div>
<div class="filters"><vscode-textfield class="search" placeholder="Filter by label or task" aria-label="Filter by text"></vscode-textfield>
<vscode-single-select class="status-filter" aria-label="Filter by status"></vscode-single-select>
<vscode-single-select class="mode-filter" aria-label="Filter by mode"></vscode-single-select></div>
<div class="banner" hidden></div><div class="list"></div><div class="detail" tabindex="-1"></div>`;

function fillSelect(select: Element, label: string, values: readonly string[], current: string | undefined): void {
  for (const value of ['', ...values]) {
    const option = document.createElement('vscode-option');
    option.setAttribute('value', value);
    option.textContent = value || label;
    if (value === (current ?? '')) option.setAttribute('selected', '');
    select.append(option);
  }
}

const search = app.querySelector<HTMLElement & { value: string }>('.search')!;
const statusSelect = app.querySelector<HTMLElement & { value: string }>('.status-filter')!;
const modeSelect = app.querySelector<HTMLElement & { value: string }>('.mode-filter')!;
fillSelect(statusSelect, 'any status', ROLLOUT_STATUSES, state.filter.status);
fillSelect(modeSelect, 'any mode', ROLLOUT_MODES, state.filter.mode);
search.value = state.filter.search ?? '';
const badge = app.querySelector('.daemon-state')!;
const banner = app.querySelector<HTMLElement>('.banner')!;
const countLabel = app.querySelector('.count')!;

let requestId = 0;
const list = new RolloutList(
  app.querySelector('.list')!,
  (cursor) => post({ type: 'listRollouts', requestId, filter: state.filter, cursor }),
  (rollout) => openRollout(rollout),
  {
    open: (rollout, mode) => post({ type: 'openRolloutTab', id: rollout.id, mode }),
    marked: (ids) => {
      compareButton.hidden = ids.length !== 2;
      compareButton.textContent = ids.length === 2 ? 'Compare 2' : 'Compare';
    },
  },
);
const compareButton = app.querySelector<HTMLElement>('.toolbar .compare')!;
compareButton.addEventListener('click', () => {
  const [left, right] = list.markedIds;
  if (left && right) post({ type: 'compareRollouts', left, right });
});
const trajectory: TrajectoryView = new TrajectoryView(app.querySelector('.detail')!, {
  annotate: (spanId, value, comment) =>
    trajectory.rolloutId && post({ type: 'annotate', rolloutId: trajectory.rolloutId, spanId, value, comment }),
  copy: (text) => post({ type: 'copy', text }),
  loadTransitions: () => trajectory.rolloutId && post({ type: 'loadTransitions', rolloutId: trajectory.rolloutId }),
  reviewReward: (rewardId, action) =>
    trajectory.rolloutId && post({ type: 'reviewReward', rolloutId: trajectory.rolloutId, rewardId, action }),
  openTab: (beside) =>
    trajectory.rolloutId &&
    post({ type: 'openRolloutTab', id: trajectory.rolloutId, mode: beside ? 'beside' : 'pinned' }),
});
trajectory.clear('Select a rollout to see its trajectory.');
const trainingRuns = new TrainingRunsView({
  list: () => post({ type: 'listTrainingRuns' }),
  open: (id, afterStep) => post({ type: 'openTrainingRun', id, ...(afterStep === undefined ? {} : { afterStep }) }),
  cancel: (id) => post({ type: 'cancelTrainingRun', id }),
  resume: (id) => post({ type: 'resumeTrainingRun', id }),
  useCheckpoint: (checkpointId) => post({ type: 'useCheckpoint', checkpointId }),
  showResult: (id) => post({ type: 'showTrainingRunResult', id }),
  openTab: (id) => post({ type: 'openRunTab', id }),
});
app.insertBefore(trainingRuns.element, app.querySelector('.list'));

function openRollout(rollout: Rollout): void {
  // Ask first: the header renders while the extension fetches the first steps.
  post({ type: 'selectRollout', id: rollout.id });
  state.selectedId = rollout.id;
  save();
  trajectory.open(rollout);
}

function reload(): void {
  requestId += 1;
  list.reset();
  post({ type: 'listRollouts', requestId, filter: state.filter, cursor: null });
}

const datasetsHost = document.createElement('div');
app.querySelector('.filters')!.after(datasetsHost);
const datasets = new DatasetsSection(datasetsHost, { scope: setScope });
/** Narrows the list to a dataset's or a batch's rollouts, or (empty) shows every rollout again. */
function setScope(scope: Pick<RolloutFilter, 'datasetId' | 'batchId'>): void {
  state.filter = { ...state.filter, datasetId: scope.datasetId, batchId: scope.batchId };
  save();
  datasets.showScope(state.filter);
  reload();
}
datasets.showScope(state.filter);

function onFilterChange(): void {
  const filter = rolloutFilter({
    datasetId: state.filter.datasetId,
    batchId: state.filter.batchId,
    status: statusSelect.value || undefined,
    mode: modeSelect.value || undefined,
    search: search.value.trim() || undefined,
  });
  if (!filter) return;
  state.filter = filter;
  save();
  reload();
}
let searchTimer: ReturnType<typeof setTimeout> | undefined;
search.addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(onFilterChange, 200);
});
statusSelect.addEventListener('change', onFilterChange);
modeSelect.addEventListener('change', onFilterChange);

function showCount(): void {
  countLabel.textContent = `${list.count}${list.count >= 200 ? '+' : ''} shown`;
}

let running = false;
window.addEventListener('message', (event: MessageEvent<unknown>) => {
  const message = extensionMessage<ExtensionToWebview>(event.data);
  if (!message) return;
  switch (message.type) {
    case 'daemonState':
      badge.textContent = message.state;
      banner.hidden = message.state !== 'failed';
      banner.textContent = message.message ?? '';
      // Each (re)connection starts the list afresh: changes made while disconnected are included.
      if (message.state === 'running' && !running) {
        reload();
        post({ type: 'listTrainingRuns' });
        post({ type: 'listDatasets' });
      }
      running = message.state === 'running';
      return;
    case 'rolloutPage':
      if (message.requestId !== requestId) return;
      list.addPage(message.items, message.nextCursor);
      showCount();
      if (state.selectedId && !trajectory.rolloutId && list.get(state.selectedId)) list.select(state.selectedId);
      return;
    case 'rolloutsChanged':
      list.applyChanges(message.rollouts, state.filter);
      for (const rollout of message.rollouts) trajectory.updateRollout(rollout);
      showCount();
      return;
    case 'spansAvailable':
      if (message.rolloutId === trajectory.rolloutId && message.toSequence > trajectory.lastSequence)
        post({ type: 'loadSpans', rolloutId: message.rolloutId, afterSequence: trajectory.lastSequence });
      return;
    case 'spans':
      if (message.rolloutId === trajectory.rolloutId) trajectory.appendSpans(message.spans, message.complete);
      return;
    case 'rewards':
      if (message.rolloutId === trajectory.rolloutId) trajectory.setRewards(message.items);
      return;
    case 'servedBy':
      if (message.rolloutId === trajectory.rolloutId) trajectory.setServedBy(message.policy, message.node);
      return;
    case 'reveal':
      if (list.get(message.rollout.id)) list.select(message.rollout.id);
      else openRollout(message.rollout);
      return;
    case 'trainingRuns':
      trainingRuns.setRuns(message.items);
      return;
    case 'trainingRunChanged':
      trainingRuns.update(message.run);
      return;
    case 'trainingRunDetail':
      trainingRuns.showDetail(message.view);
      return;
    case 'showTrainingRun':
      trainingRuns.showRun(message.id);
      return;
    case 'datasets':
      datasets.show(message.items);
      datasets.showScope(state.filter);
      return;
    case 'showBatch':
      if (state.filter.batchId !== message.batchId) setScope({ batchId: message.batchId });
      return;
    case 'transitions':
      trajectory.setTransitions(message.view);
      return;
    case 'error':
      banner.hidden = false;
      banner.textContent = message.message;
      return;
  }
});

post({ type: 'ready' });
