/**
 * The panel's **Training runs** section: the runs (live: a row changes as rounds are recorded)
 * and the open run's detail — status with Cancel, the configuration, the per-step metric chart,
 * and the algorithm's own part (APO: the leaderboard; each candidate expands to the critique that
 * produced it and its prompt). Generic over the algorithm: an unknown one shows status and metrics.
 */
import type { TrainingRun } from '../trainer-daemon/protocol/records';
import type { ApoCandidate } from '../trainer-daemon/protocol/apo';
import { button, el } from './dom';
import { formatTime } from './format';
import { metricChartSvg } from './metricChart';
import { chartedMetrics, RUN_STATUS_ICON, runOutcome, runSubject, scoreText } from './trainingRunFormat';
import type { TrainingRunView } from './trainingRunProtocol';

export interface TrainingRunActions {
  list(): void;
  open(id: string): void;
  cancel(id: string): void;
  /** The run's outcome in the editor (APO: the diff with Apply / Keep). */
  showResult(id: string): void;
}

export class TrainingRunsView {
  readonly element = el('details', 'training-runs');
  private readonly summary = el('summary', 'section-title', 'Training runs');
  private readonly listElement = el('div', 'run-list');
  private readonly detailElement = el('div', 'run-detail');
  private runs: TrainingRun[] = [];
  private openId: string | undefined;

  constructor(private readonly actions: TrainingRunActions) {
    this.element.append(this.summary, this.listElement, this.detailElement);
    this.render();
  }

  /** The list from the daemon; a run in progress opens when no run is open yet. */
  setRuns(items: readonly TrainingRun[]): void {
    this.runs = [...items];
    const running = this.runs.find((run) => run.status === 'running');
    if (!this.openId && running) {
      this.openId = running.id;
      this.element.open = true;
      this.actions.open(running.id);
    }
    this.render();
  }

  /** A run changed: its row is updated (or added, and the section opened), an open detail refetched. */
  update(run: TrainingRun): void {
    const index = this.runs.findIndex((item) => item.id === run.id);
    if (index >= 0) this.runs[index] = run;
    else {
      this.runs.unshift(run);
      this.element.open = true;
      this.openId ??= run.id;
    }
    this.render();
    if (this.openId === run.id) this.actions.open(run.id);
  }

  private render(): void {
    this.summary.textContent = `Training runs (${this.runs.length})`;
    this.listElement.replaceChildren(...(this.runs.length ? this.runs.map((run) => this.row(run)) : [el('div', 'empty', 'No training runs yet. Run “Lightning: Optimize This Prompt” on a prompt.')]));
  }

  private row(run: TrainingRun): HTMLElement {
    const row = el('div', `run-row status-${run.status}${run.id === this.openId ? ' selected' : ''}`);
    row.dataset.runId = run.id;
    row.tabIndex = 0;
    const status = el('span', 'status', RUN_STATUS_ICON[run.status]);
    status.title = run.status;
    row.append(status, el('span', 'algorithm', run.algorithm), el('span', 'title', runSubject(run)), el('span', 'outcome', runOutcome(run)), el('span', 'muted', formatTime(run.createdAt)));
    const open = (): void => {
      this.openId = run.id;
      this.render();
      this.actions.open(run.id);
    };
    row.addEventListener('click', open);
    row.addEventListener('keydown', (event) => (event.key === 'Enter' || event.key === ' ') && open());
    return row;
  }

  showDetail(view: TrainingRunView): void {
    if (view.run.id !== this.openId) return;
    const { run } = view;
    const header = el('div', 'run-header');
    header.append(el('strong', '', `${run.algorithm} ${run.id}`), el('span', `status status-${run.status}`, `${RUN_STATUS_ICON[run.status]} ${run.status}${run.cancelRequested && run.status === 'running' ? ' (cancelling)' : ''}`));
    if ((run.status === 'running' || run.status === 'queued') && !run.cancelRequested) header.append(button('Cancel', 'Cancel this training run', () => this.actions.cancel(run.id), 'cancel-run'));
    if (run.result !== null) header.append(button('Show Diff', 'Show the result in the editor', () => this.actions.showResult(run.id), 'show-result'));
    const parts: HTMLElement[] = [header, el('div', 'facts', [runSubject(run), runOutcome(run)].filter(Boolean).join(' · '))];
    const chart = el('div', 'chart');
    chart.innerHTML = metricChartSvg(view.metrics, { names: chartedMetrics(run.algorithm) });
    if (chart.innerHTML === '') chart.append(el('div', 'muted', 'No metrics yet.'));
    parts.push(chart);
    switch (view.extra.kind) {
      case 'apo':
        parts.push(this.leaderboard(view.extra.candidates));
        break;
      case 'none':
        break;
    }
    this.detailElement.replaceChildren(...parts);
    this.detailElement.dataset.runId = run.id;
  }

  private leaderboard(candidates: readonly ApoCandidate[]): HTMLElement {
    const board = el('div', 'leaderboard');
    board.append(el('h4', '', `Leaderboard (${candidates.length} candidates)`));
    candidates.forEach((candidate, rank) => {
      const item = el('details', 'candidate');
      item.dataset.candidateId = candidate.id;
      const origin = candidate.parentId ? `round ${candidate.round}, from ${candidate.parentId}` : 'original prompt';
      item.append(el('summary', '', `#${rank + 1} ${candidate.id} · val ${scoreText(candidate.valScore)} · batch ${scoreText(candidate.batchScore)} · ${origin}`));
      if (candidate.critique) item.append(el('div', 'label', `Critique (${candidate.critiqueStyle ?? 'critique'})`), el('div', 'critique content', candidate.critique));
      item.append(el('div', 'label', `Prompt (version ${candidate.version}, ${candidate.rollouts} rollouts)`), el('div', 'prompt content', candidate.prompt));
      board.append(item);
    });
    return board;
  }
}
