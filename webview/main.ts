/**
 * The side panel's browser code: filters, the live rollout list and the selected rollout's
 * trajectory. It speaks only to the extension, through protocol/ui/panelMessages.ts's messages (the extension
 * validates what the page sends; the page reads what it gets with ./pageInput, without zod); its filters and selection
 * survive the view being hidden (getState/setState).
 */
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-textfield/index.js';
import '@vscode-elements/elements/dist/vscode-single-select/index.js';
import '@vscode-elements/elements/dist/vscode-option/index.js';
import './panel.css';
import type { Rollout } from '../trainer-daemon/protocol/records';
import { ROLLOUT_MODES, ROLLOUT_STATUSES } from '../trainer-daemon/protocol/rolloutValues';
import type {
  ExtensionToWebview,
  RolloutFilter,
  WebviewToExtension,
} from '../trainer-daemon/protocol/ui/panelMessages';
import { extensionMessage, rolloutFilter } from './pageInput';
import { RolloutList, type SectionKey } from './rolloutList';
import { countText } from '../trainer-daemon/protocol/ui/rolloutText';
import { TrajectoryView } from './trajectory';
import { TrainingRunsView } from './trainingRuns';
import { DatasetsSection } from './datasets';
import { DEFAULT_SMOOTHING, smoothingWeight } from '../trainer-daemon/protocol/ui/chartScale';

interface PanelState {
  filter: RolloutFilter;
  selectedId?: string;
  /** The training charts' smoothing weight (0–0.99). */
  smoothing?: number;
}

interface VsCodeApi {
  postMessage(message: WebviewToExtension): void;
  getState(): unknown;
  setState(state: PanelState): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const saved = vscode.getState() as Partial<PanelState> | undefined;
const state: PanelState = {
  filter: rolloutFilter(saved?.filter ?? {}) ?? {},
  selectedId: saved?.selectedId,
  smoothing: smoothingWeight(saved?.smoothing, DEFAULT_SMOOTHING),
};
const post = (message: WebviewToExtension): void => vscode.postMessage(message);
const save = (): void => vscode.setState(state);

const app = document.getElementById('app')!;
app.innerHTML = `<div class="toolbar"><span class="count" aria-live="polite"></span><vscode-button class="compare" secondary hidden aria-label="Compare the two marked rollouts (Space or Ctrl+click marks one)">Compare</vscode-button></div>
<div class="filters"><vscode-textfield class="search" placeholder="Filter by label or task" aria-label="Filter by text"></vscode-textfield>
<vscode-single-select class="status-filter" aria-label="Filter by status"></vscode-single-select>
<vscode-single-select class="mode-filter" aria-label="Filter by mode"></vscode-single-select></div>
<div class="banner" hidden></div><div class="list"></div><div class="detail" tabindex="-1"></div>
<div class="status-line" role="status"><span class="daemon-state state-starting">Daemon starting</span></div>`;

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
const daemonState = app.querySelector<HTMLElement>('.daemon-state')!;
const banner = app.querySelector<HTMLElement>('.banner')!;
const countLabel = app.querySelector('.count')!;

let requestId = 0;
/** Which section each page request fills (a reload forgets the older ones, whose answers are then dropped). */
const pageRequests = new Map<number, SectionKey>();
/** The list is grouped by origin unless it shows one dataset's or one batch's rollouts. */
const isGrouped = (): boolean => !state.filter.batchId && !state.filter.datasetId;
function requestPage(section: SectionKey, cursor: string | null): void {
  requestId += 1;
  pageRequests.set(requestId, section);
  const grouped = isGrouped();
  post({
    type: 'listRollouts',
    requestId,
    filter: section === null ? state.filter : { ...state.filter, batchId: section },
    cursor,
    ...(grouped && section === null ? { inBatch: false } : {}),
  });
}
let groupsRequest = 0;
let groupsTimer: ReturnType<typeof setTimeout> | undefined;
/** The runs the list asks for: a page more each time its "more runs" row is chosen, up to the daemon's most. */
const RUNS_PAGE = 100;
const RUNS_MAX = 1_000;
let runLimit = RUNS_PAGE;
function requestGroups(): void {
  clearTimeout(groupsTimer);
  groupsTimer = undefined;
  groupsRequest += 1;
  post({ type: 'listGroups', requestId: groupsRequest, filter: state.filter, limit: runLimit });
}
/** Counts follow live changes, at most twice a second. */
function scheduleGroups(): void {
  groupsTimer ??= setTimeout(requestGroups, 500);
}
let total: number | undefined;
const list = new RolloutList(app.querySelector('.list')!, requestPage, (rollout) => openRollout(rollout), {
  open: (rollout, mode) => post({ type: 'openRolloutTab', id: rollout.id, mode }),
  marked: (ids) => {
    compareButton.hidden = ids.length !== 2;
    compareButton.textContent = ids.length === 2 ? 'Compare 2' : 'Compare';
  },
  moreRuns: () => {
    runLimit = Math.min(RUNS_MAX, runLimit + RUNS_PAGE);
    requestGroups();
  },
});
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
  revealTab: () => trajectory.rolloutId && post({ type: 'openRolloutTab', id: trajectory.rolloutId, mode: 'preview' }),
  loadSteps: (afterSequence) =>
    trajectory.rolloutId && post({ type: 'loadSpans', rolloutId: trajectory.rolloutId, afterSequence }),
});
trajectory.clear('Select a rollout to see its trajectory.');
const trainingRuns = new TrainingRunsView(
  {
    list: () => post({ type: 'listTrainingRuns' }),
    open: (id, afterStep) => post({ type: 'openTrainingRun', id, ...(afterStep === undefined ? {} : { afterStep }) }),
    cancel: (id) => post({ type: 'cancelTrainingRun', id }),
    resume: (id) => post({ type: 'resumeTrainingRun', id }),
    useCheckpoint: (checkpointId) => post({ type: 'useCheckpoint', checkpointId }),
    exportCheckpoint: (checkpointId) => post({ type: 'exportCheckpoint', checkpointId }),
    deleteCheckpoint: (checkpointId) => post({ type: 'deleteCheckpoint', checkpointId }),
    showResult: (id) => post({ type: 'showTrainingRunResult', id }),
    openTab: (id) => post({ type: 'openRunTab', id }),
    smoothingChanged: (weight) => {
      state.smoothing = weight;
      save();
    },
  },
  state.smoothing,
);
app.insertBefore(trainingRuns.element, app.querySelector('.list'));

function openRollout(rollout: Rollout): void {
  // Ask first: the header renders while the extension fetches the first steps.
  post({ type: 'selectRollout', id: rollout.id });
  state.selectedId = rollout.id;
  save();
  trajectory.open(rollout);
}

function reload(): void {
  pageRequests.clear();
  total = undefined;
  runLimit = RUNS_PAGE;
  showCount();
  list.reset(isGrouped());
  requestPage(null, null);
  requestGroups();
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

/** The one count: every rollout the filter matches, as the daemon counted them (the status bar's, unfiltered). */
function showCount(): void {
  const filtered = Boolean(
    state.filter.status || state.filter.mode || state.filter.search || state.filter.batchId || state.filter.datasetId,
  );
  countLabel.textContent = total === undefined ? '' : countText(total, filtered);
}

let running = false;
window.addEventListener('message', (event: MessageEvent<unknown>) => {
  const message = extensionMessage<ExtensionToWebview>(event.data);
  if (!message) return;
  switch (message.type) {
    case 'daemonState':
      daemonState.textContent = `Daemon ${message.state}`;
      daemonState.className = `daemon-state state-${message.state}`;
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
    case 'rolloutPage': {
      const section = pageRequests.get(message.requestId);
      if (section === undefined) return;
      pageRequests.delete(message.requestId);
      list.addPage(section, message.items, message.nextCursor);
      if (state.selectedId && !trajectory.rolloutId && list.get(state.selectedId)) list.select(state.selectedId);
      return;
    }
    case 'rolloutGroups':
      if (message.requestId !== groupsRequest) return;
      list.setGroups(message.groups, runLimit < RUNS_MAX);
      total = message.groups.total;
      showCount();
      return;
    case 'rolloutsChanged':
      if (list.applyChanges(message.rollouts, state.filter)) scheduleGroups();
      for (const rollout of message.rollouts) trajectory.updateRollout(rollout);
      return;
    case 'spansAvailable':
      if (
        message.rolloutId === trajectory.rolloutId &&
        trajectory.showsSteps &&
        message.toSequence > trajectory.lastSequence
      )
        post({ type: 'loadSpans', rolloutId: message.rolloutId, afterSequence: trajectory.lastSequence });
      return;
    case 'spans':
      if (message.rolloutId === trajectory.rolloutId) trajectory.appendSpans(message.spans, message.complete);
      return;
    case 'rewards':
      if (message.rolloutId === trajectory.rolloutId) trajectory.setRewards(message.items);
      return;
    case 'rolloutInTab':
      trajectory.setInTab(message.rolloutId, message.inTab);
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
