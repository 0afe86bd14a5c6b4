/**
 * The panel's **Training runs** section: the runs (live: a row changes as rounds are recorded) and the open run's
 * detail — status with Cancel (and Resume for a stopped GRPO run), the configuration, the metric charts, and the
 * algorithm's own part (APO: the leaderboard; each candidate expands to the critique that produced it and its prompt;
 * GRPO and SFT: small multiples per metric and the checkpoints, each with Use, Export and Delete, and the run's total
 * on disk). Generic over the algorithm: an unknown one shows status and metrics. The open run's metrics are kept here;
 * a live refresh fetches only newer points.
 */
import type { TrainingAlgorithm, TrainingRun } from '../trainer-daemon/protocol/training';
import { assertNever } from '../trainer-daemon/protocol/assert';
import { isResumable } from '../trainer-daemon/protocol/status';
import type { ApoCandidate } from '../trainer-daemon/protocol/apo';
import type { MetricSeries } from '../trainer-daemon/protocol/training';
import { checkpointSize, checkpointsBytes, describeMetrics, formatBytes } from '../trainer-daemon/protocol/format';
import { placementDetail } from '../trainer-daemon/protocol/placement';
import { checkpointTitle } from '../trainer-daemon/protocol/policyCheckpoint';
import { button, el, statusIcon } from './dom';
import { runLabel } from '../trainer-daemon/protocol/runLabel';
import { formatTime } from '../trainer-daemon/protocol/ui/rolloutText';
import {
  chartSvg,
  grpoCharts,
  mergeMetrics,
  sftCharts,
  type ChartData,
} from '../trainer-daemon/protocol/ui/grpoCharts';
import { CHART_COLOURS, metricChartSvg } from '../trainer-daemon/protocol/ui/chart';
import { sharedStepRange } from '../trainer-daemon/protocol/ui/chartScale';
import { attachChartHover, pointText, smoothingControl } from './chartControls';
import { chartedMetrics, runOutcome, runSubject, scoreText } from '../trainer-daemon/protocol/ui/trainingRunFormat';
import type { TrainingRunView } from '../trainer-daemon/protocol/ui/trainingRunView';

type TrainingRunDetailCheckpoints = Extract<TrainingRunView, { algorithm: 'grpo' }>['checkpoints'];

export interface TrainingRunActions {
  list(): void;
  /** The run's detail; `afterStep`: only metric points after it (the panel has the rest). */
  open(id: string, afterStep?: number): void;
  cancel(id: string): void;
  resume(id: string): void;
  useCheckpoint(checkpointId: string): void;
  exportCheckpoint(checkpointId: string): void;
  /** Delete a checkpoint (Lightning: Delete Checkpoint…, which asks first). */
  deleteCheckpoint(checkpointId: string): void;
  /** The run's outcome in the editor (APO: the diff with Apply / Keep). */
  showResult(id: string): void;
  /** The run in an editor tab: full-size charts, iterations, checkpoints. */
  openTab(id: string): void;
  /** The charts' smoothing weight changed (the page keeps it). */
  smoothingChanged(weight: number): void;
}

export class TrainingRunsView {
  readonly element = el('details', 'training-runs');
  private readonly summary = el('summary', 'section-title', 'Training runs');
  private readonly listElement = el('div', 'run-list');
  private readonly detailElement = el('div', 'run-detail');
  private runs: TrainingRun[] = [];
  private openId: string | undefined;
  /** The open run's metric points so far. */
  private metrics: MetricSeries = [];

  /** `smoothing`: the charts' smoothing weight (0–0.99), as the page saved it. */
  constructor(
    private readonly actions: TrainingRunActions,
    private smoothing = 0,
  ) {
    this.element.append(this.summary, this.listElement, this.detailElement);
    this.render();
  }

  /** The list from the daemon; a run in progress opens when no run is open yet. */
  setRuns(items: readonly TrainingRun[]): void {
    this.runs = [...items];
    const running = this.runs.find((run) => run.status === 'running');
    if (!this.openId && running) this.showRun(running.id);
    else this.render();
  }

  /** Opens a run's detail (a row clicked, a run started from the command palette). */
  showRun(id: string): void {
    this.openId = id;
    this.metrics = [];
    this.element.open = true;
    this.render();
    this.actions.open(id);
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
    if (this.openId === run.id) this.refresh(run.id);
  }

  /** Fetches the open run again, with the metric points of its last step onwards (late ones included). */
  private refresh(id: string): void {
    const last = this.metrics.reduce((max, point) => Math.max(max, point.step), -1);
    this.actions.open(id, last < 0 ? undefined : last - 1);
  }

  private render(): void {
    this.summary.textContent = `Training runs (${this.runs.length})`;
    this.listElement.replaceChildren(
      ...(this.runs.length
        ? this.runs.map((run) => this.row(run))
        : [
            el(
              'div',
              'empty',
              'No training runs yet. Run “Lightning: Start Training” (or “Optimize This Prompt” on a prompt).',
            ),
          ]),
    );
  }

  private row(run: TrainingRun): HTMLElement {
    const row = el('div', `run-row status-${run.status}${run.id === this.openId ? ' selected' : ''}`);
    row.dataset.runId = run.id;
    row.tabIndex = 0;
    row.append(
      statusIcon(run.status),
      el('span', 'algorithm', run.algorithm),
      el('span', 'title', runSubject(run)),
      el('span', 'outcome', runOutcome(run)),
      el('span', 'muted', formatTime(run.createdAt)),
    );
    const open = (): void => this.showRun(run.id);
    row.addEventListener('click', open);
    row.addEventListener('keydown', (event) => (event.key === 'Enter' || event.key === ' ') && open());
    return row;
  }

  showDetail(view: TrainingRunView): void {
    if (view.run.id !== this.openId) return;
    const { run } = view;
    // A partial view for a detail that has nothing to merge it into (reopened meanwhile): fetch it whole.
    if (view.afterStep >= 0 && this.metrics.length === 0) return this.actions.open(run.id);
    this.metrics = view.afterStep < 0 ? view.metrics : mergeMetrics(this.metrics, view.metrics, view.afterStep);
    const header = el('div', 'run-header');
    header.append(el('strong', 'run-title', runLabel(run)), runStatus(run));
    if ((run.status === 'running' || run.status === 'queued') && !run.cancelRequested)
      header.append(button('Cancel', 'Cancel this training run', () => this.actions.cancel(run.id), 'cancel-run'));
    if (isResumable(run))
      header.append(
        button('Resume', 'Resume this run from its last checkpoint', () => this.actions.resume(run.id), 'resume-run'),
      );
    header.append(
      button(
        'Open in Editor',
        'Open this run in an editor tab (full-size charts, iterations)',
        () => this.actions.openTab(run.id),
        'open-run-tab',
      ),
    );
    const parts: HTMLElement[] = [
      header,
      el('div', 'facts', [runSubject(run), runOutcome(run)].filter(Boolean).join(' · ')),
      ...placementDetail(run).map((line) => el('div', 'facts placement', line)),
    ];
    switch (view.algorithm) {
      case 'apo':
        if (view.run.result !== null)
          header.append(
            button('Show Diff', 'Show the result in the editor', () => this.actions.showResult(run.id), 'show-result'),
          );
        parts.push(this.combinedChart(view.algorithm), this.leaderboard(view.candidates));
        break;
      case 'grpo':
        parts.push(this.smallMultiples(grpoCharts(this.metrics)), this.checkpoints(view.checkpoints));
        break;
      case 'sft':
        parts.push(this.smallMultiples(sftCharts(this.metrics)), this.checkpoints(view.checkpoints));
        break;
      default:
        assertNever(view);
    }
    this.detailElement.replaceChildren(...parts);
    this.detailElement.dataset.runId = run.id;
  }

  private combinedChart(algorithm: TrainingAlgorithm): HTMLElement {
    const chart = el('div', 'chart');
    chart.innerHTML = metricChartSvg(this.metrics, { names: chartedMetrics(algorithm) });
    if (chart.innerHTML === '') chart.append(el('div', 'muted', 'No metrics yet.'));
    return chart;
  }

  /**
   * One small chart per GRPO (or SFT) metric on one shared iteration axis, each with its text summary (first → last)
   * and the value under the pointer; the smoothing slider above them redraws them all.
   */
  private smallMultiples(charts: readonly ChartData[]): HTMLElement {
    const box = el('div', 'charts-box');
    const grid = el('div', 'charts');
    if (charts.length === 0) {
      grid.append(el('div', 'muted', 'No iterations yet: the first chart appears after the first update.'));
      return grid;
    }
    const draw = (): void => {
      const xRange = sharedStepRange(charts.map((chart) => chart.points));
      grid.replaceChildren(
        ...charts.map((chart, index) => {
          const card = el('figure', 'chart-card');
          card.dataset.metric = chart.metric;
          const svg = el('div', 'chart-svg');
          svg.innerHTML = chartSvg(chart, {
            colour: CHART_COLOURS[index % CHART_COLOURS.length],
            smoothing: this.smoothing,
            ...(xRange ? { xRange } : {}),
          });
          const readout = el('div', 'chart-summary chart-readout');
          const byStep = new Map(chart.points.map((point) => [point.step, point]));
          attachChartHover(
            svg,
            readout,
            [...byStep.keys()],
            (step) => `iteration ${step}: ${pointText(byStep.get(step), chart.unit)}`,
            chart.summary,
          );
          card.append(el('figcaption', 'chart-title', chart.title), svg, readout);
          return card;
        }),
      );
    };
    draw();
    box.append(
      smoothingControl(this.smoothing, (weight) => {
        this.smoothing = weight;
        this.actions.smoothingChanged(weight);
        draw();
      }),
      grid,
    );
    return box;
  }

  private checkpoints(checkpoints: TrainingRunDetailCheckpoints): HTMLElement {
    const section = el('div', 'checkpoints');
    // The run's total on disk, as `lightning checkpoints` sums it: what retention and Delete act on.
    const heading = el('h4', '', `Checkpoints (${checkpoints.length})`);
    if (checkpoints.length > 0)
      heading.append(el('span', 'checkpoints-total muted', ` · ${formatBytes(checkpointsBytes(checkpoints))} on disk`));
    section.append(heading);
    if (checkpoints.length === 0) section.append(el('div', 'muted', 'None yet: one is saved after each iteration.'));
    for (const checkpoint of [...checkpoints].reverse()) {
      const row = el('div', 'checkpoint-row');
      row.dataset.checkpointId = checkpoint.id;
      // Summed up as everywhere a checkpoint is offered (Use Checkpoint's quick pick, `lightning checkpoints`).
      row.append(
        el('span', 'checkpoint-step', checkpointTitle(checkpoint)),
        el('span', 'checkpoint-metrics muted', describeMetrics(checkpoint.metrics)),
      );
      if (checkpoint.bytes !== undefined) row.append(el('span', 'checkpoint-size muted', checkpointSize(checkpoint)));
      const actions = el('span', 'checkpoint-actions');
      actions.append(
        button(
          'Use',
          `Point rollouts at checkpoint ${checkpoint.id} (Lightning: Use Checkpoint)`,
          () => this.actions.useCheckpoint(checkpoint.id),
          'use-checkpoint',
        ),
        button(
          'Export',
          `Write checkpoint ${checkpoint.id} as a PEFT adapter or a Hugging Face folder (Lightning: Export Checkpoint…)`,
          () => this.actions.exportCheckpoint(checkpoint.id),
          'export-checkpoint',
        ),
        button(
          'Delete',
          `Delete checkpoint ${checkpoint.id} and its folder (Lightning: Delete Checkpoint…, which asks first)`,
          () => this.actions.deleteCheckpoint(checkpoint.id),
          'delete-checkpoint',
        ),
      );
      row.append(actions);
      row.title = checkpoint.path;
      section.append(row);
    }
    return section;
  }

  private leaderboard(candidates: readonly ApoCandidate[]): HTMLElement {
    const board = el('div', 'leaderboard');
    board.append(el('h4', '', `Leaderboard (${candidates.length} candidates)`));
    candidates.forEach((candidate, rank) => {
      const item = el('details', 'candidate');
      item.dataset.candidateId = candidate.id;
      const origin = candidate.parentId ? `round ${candidate.round}, from ${candidate.parentId}` : 'original prompt';
      item.append(
        el(
          'summary',
          '',
          `#${rank + 1} ${candidate.id} · val ${scoreText(candidate.valScore)} · batch ${scoreText(candidate.batchScore)} · ${origin}`,
        ),
      );
      if (candidate.critique)
        item.append(
          el('div', 'label', `Critique (${candidate.critiqueStyle ?? 'critique'})`),
          el('div', 'critique content', candidate.critique),
        );
      item.append(
        el('div', 'label', `Prompt (version ${candidate.version}, ${candidate.rollouts} rollouts)`),
        el('div', 'prompt content', candidate.prompt),
      );
      board.append(item);
    });
    return board;
  }
}

/** A run's status as its codicon and its word ("(cancelling)" once asked to stop). */
function runStatus(run: TrainingRun): HTMLElement {
  const status = el('span', `status status-${run.status}`);
  status.append(
    statusIcon(run.status),
    ` ${run.status}${run.cancelRequested && run.status === 'running' ? ' (cancelling)' : ''}`,
  );
  return status;
}
