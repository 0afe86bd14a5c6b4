/**
 * A training run in an editor tab: full-size charts of its metrics (GRPO: sampled reward ± std,
 * validation, loss, KL, entropy, tokens/s, GPU memory; any other algorithm: each metric it
 * records) with the value under the pointer, another run drawn over them to compare, a table with
 * one row per iteration (its metrics, its checkpoint with Use, its best and worst rollouts one click
 * away). Charts come from the panel's one chart module (protocol/ui/chart.ts), on one iteration axis, with
 * the panel's smoothing slider (chartControls.ts); live while the run runs.
 */
import type { Checkpoint } from '../../trainer-daemon/protocol/records';
import type { TrainingRun } from '../../trainer-daemon/protocol/training';
import type { MetricSeries } from '../../trainer-daemon/protocol/training';
import { button, el, statusIcon } from '../dom';
import { formatTime } from '../../trainer-daemon/protocol/ui/rolloutText';
import { checkpointSize, checkpointsTotal } from '../../trainer-daemon/protocol/format';
import { chartSvg, formatValue, mergeMetrics, type ChartData } from '../../trainer-daemon/protocol/ui/grpoCharts';
import { CHART_COLOURS } from '../../trainer-daemon/protocol/ui/chart';
import { sharedStepRange, type Domain } from '../../trainer-daemon/protocol/ui/chartScale';
import { attachChartHover, pointText, smoothingControl } from '../chartControls';
import { placementDetail } from '../../trainer-daemon/protocol/placement';
import { assertNever } from '../../trainer-daemon/protocol/assert';
import { runCharts } from './runCharts';
import { runOutcome, runSubject, runTitle } from '../../trainer-daemon/protocol/ui/trainingRunFormat';
import type { TrainingRunView } from '../../trainer-daemon/protocol/ui/trainingRunView';

export interface RunTabActions {
  loadRun(runId: string, afterStep?: number): void;
  listRuns(): void;
  useCheckpoint(checkpointId: string): void;
  exportCheckpoint(checkpointId: string): void;
  deleteCheckpoint(checkpointId: string): void;
  openIterationRollout(runId: string, step: number, which: 'best' | 'worst'): void;
  overlayChanged(runId: string | null): void;
  smoothingChanged(weight: number): void;
}

const CHART_WIDTH = 560;
const CHART_HEIGHT = 220;

export class RunTab {
  readonly element = el('div', 'run-tab');
  private readonly header = el('div', 'tab-header');
  private readonly charts = el('div', 'run-charts');
  private readonly table = el('div', 'run-table-box');
  private readonly overlaySelect = document.createElement('vscode-single-select') as HTMLElement & { value: string };
  private run: TrainingRun | undefined;
  private metrics: MetricSeries = [];
  private checkpoints: Checkpoint[] = [];
  private overlay: { run: TrainingRun; metrics: MetricSeries } | undefined;
  private runs: TrainingRun[] = [];

  constructor(
    readonly runId: string,
    private overlayId: string | null,
    private readonly actions: RunTabActions,
    private smoothing: number,
  ) {
    this.overlaySelect.setAttribute('aria-label', 'Draw another run over this one');
    this.overlaySelect.className = 'overlay-select';
    this.overlaySelect.addEventListener('change', () => {
      this.overlayId = this.overlaySelect.value || null;
      this.overlay = undefined;
      this.actions.overlayChanged(this.overlayId);
      if (this.overlayId) this.actions.loadRun(this.overlayId);
      else this.renderCharts();
    });
    this.element.append(this.header, this.charts, this.table);
    this.header.append(el('h2', undefined, `Training run ${runId}`));
    this.charts.append(el('div', 'muted', 'Loading…'));
    actions.loadRun(runId);
    if (overlayId) actions.loadRun(overlayId);
    actions.listRuns();
  }

  setRuns(runs: readonly TrainingRun[]): void {
    this.runs = runs.filter((run) => run.id !== this.runId);
    this.fillOverlaySelect();
  }

  private fillOverlaySelect(): void {
    this.overlaySelect.replaceChildren();
    for (const run of [null, ...this.runs]) {
      const option = document.createElement('vscode-option');
      option.setAttribute('value', run?.id ?? '');
      option.textContent = run ? `${run.algorithm} ${run.id} · ${runSubject(run)}` : 'compare with another run…';
      if ((run?.id ?? null) === this.overlayId) option.setAttribute('selected', '');
      this.overlaySelect.append(option);
    }
  }

  showView(view: TrainingRunView): void {
    if (view.run.id === this.overlayId) {
      this.overlay = {
        run: view.run,
        metrics:
          view.afterStep < 0 || !this.overlay
            ? view.metrics
            : mergeMetrics(this.overlay.metrics, view.metrics, view.afterStep),
      };
      this.renderCharts();
      return;
    }
    if (view.run.id !== this.runId) return;
    if (view.afterStep >= 0 && this.metrics.length === 0) return this.actions.loadRun(this.runId);
    this.run = view.run;
    this.metrics = view.afterStep < 0 ? view.metrics : mergeMetrics(this.metrics, view.metrics, view.afterStep);
    this.checkpoints = checkpointsOf(view);
    this.renderHeader();
    this.renderCharts();
    this.renderTable();
  }

  /** The run changed (live): its newer points are fetched. */
  runChanged(run: TrainingRun): void {
    if (run.id !== this.runId && run.id !== this.overlayId) return;
    if (run.id === this.overlayId) return this.actions.loadRun(run.id);
    const last = this.metrics.reduce((max, point) => Math.max(max, point.step), -1);
    this.actions.loadRun(run.id, last < 0 ? undefined : last - 1);
  }

  private renderHeader(): void {
    const run = this.run!;
    const title = el('h2', `status-${run.status}`);
    title.append(statusIcon(run.status), el('span', 'title', runTitle(run)));
    title.title = `training run ${run.id}`;
    const facts = el(
      'div',
      'facts',
      [run.status, run.id, runSubject(run), runOutcome(run), `started ${formatTime(run.startedAt ?? run.createdAt)}`]
        .filter(Boolean)
        .join(' · '),
    );
    const tools = el('div', 'facts chart-tools');
    tools.append(
      el('span', undefined, 'Overlay:'),
      this.overlaySelect,
      smoothingControl(this.smoothing, (weight) => {
        this.smoothing = weight;
        this.actions.smoothingChanged(weight);
        this.renderCharts();
      }),
    );
    this.header.replaceChildren(
      title,
      facts,
      ...placementDetail(run).map((line) => el('div', 'facts placement', line)),
      tools,
    );
    if (run.error) this.header.append(el('div', 'error', run.error));
  }

  private renderCharts(): void {
    if (!this.run) return;
    const charts = runCharts(this.run.algorithm, this.metrics);
    const overlay = this.overlay
      ? new Map(runCharts(this.overlay.run.algorithm, this.overlay.metrics).map((chart) => [chart.metric, chart]))
      : undefined;
    if (charts.length === 0)
      return void this.charts.replaceChildren(
        el('div', 'muted', 'No iterations yet: the charts appear after the first update.'),
      );
    // One iteration axis for all (validation's iteration 0 included), the other run's too.
    const xRange = sharedStepRange([...charts, ...(overlay?.values() ?? [])].map((chart) => chart.points));
    this.charts.replaceChildren(
      ...charts.map((chart, index) => this.chartCard(chart, index, overlay?.get(chart.metric), xRange)),
    );
  }

  private chartCard(
    chart: ChartData,
    index: number,
    overlay: ChartData | undefined,
    xRange: Domain | undefined,
  ): HTMLElement {
    const card = el('figure', 'chart-card large');
    card.dataset.metric = chart.metric;
    const svgBox = el('div', 'chart-svg');
    const colour = CHART_COLOURS[index % CHART_COLOURS.length]!;
    svgBox.innerHTML = chartSvg(chart, {
      colour,
      width: CHART_WIDTH,
      height: CHART_HEIGHT,
      yTicks: 5,
      smoothing: this.smoothing,
      ...(xRange ? { xRange } : {}),
      // The other run in the same colour, dashed: each chart's two lines read as one metric, two runs.
      ...(overlay ? { overlay: { points: overlay.points, colour, label: this.overlayId ?? '' } } : {}),
    });
    const readout = el('div', 'chart-readout muted');
    readout.setAttribute('aria-live', 'polite');
    const mine = new Map(chart.points.map((point) => [point.step, point]));
    const theirs = new Map(overlay?.points.map((point) => [point.step, point]) ?? []);
    const steps = [...new Set([...mine.keys(), ...theirs.keys()])].sort((a, b) => a - b);
    attachChartHover(
      svgBox,
      readout,
      steps,
      (step) =>
        `iteration ${step}: ${pointText(mine.get(step), chart.unit)}${overlay ? ` · ${this.overlayId}: ${pointText(theirs.get(step), chart.unit)}` : ''}`,
      overlay ? `— ${this.runId}   - - ${this.overlayId}` : 'Hover the chart for values.',
    );
    card.append(
      el('figcaption', 'chart-title', chart.title),
      svgBox,
      el('div', 'chart-summary', chart.summary),
      readout,
    );
    return card;
  }

  private renderTable(): void {
    const run = this.run!;
    const charts = runCharts(run.algorithm, this.metrics);
    const steps = [...new Set(this.metrics.map((point) => point.step))].sort((a, b) => b - a);
    const checkpoints = new Map(this.checkpoints.map((checkpoint) => [checkpoint.step, checkpoint]));
    const table = el('table', 'run-table');
    table.setAttribute('aria-label', 'Iterations');
    const head = el('tr');
    for (const title of ['iteration', ...charts.map((chart) => chart.title), 'checkpoint', 'rollouts'])
      head.append(el('th', undefined, title));
    table.append(head);
    for (const step of steps) {
      const row = el('tr');
      row.dataset.step = String(step);
      row.append(el('td', undefined, String(step)));
      for (const chart of charts) {
        const point = chart.points.find((p) => p.step === step);
        const band =
          point?.low !== undefined && point.high !== undefined
            ? ` ± ${formatValue((point.high - point.low) / 2, chart.unit)}`
            : '';
        row.append(el('td', undefined, point ? `${formatValue(point.value, chart.unit)}${band}` : ''));
      }
      const checkpointCell = el('td');
      const checkpoint = checkpoints.get(step);
      if (checkpoint)
        checkpointCell.append(
          button(
            'Use',
            `Point rollouts at checkpoint ${checkpoint.id} (Lightning: Use Checkpoint)`,
            () => this.actions.useCheckpoint(checkpoint.id),
            'use-checkpoint',
          ),
        );
      if (checkpoint)
        checkpointCell.append(
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
          el('span', 'checkpoint-size muted', checkpointSize(checkpoint)),
        );
      const rollouts = el('td');
      if (hasIterationRollouts(run))
        rollouts.append(
          button(
            'Best',
            `Open the best rollout of iteration ${step}`,
            () => this.actions.openIterationRollout(run.id, step, 'best'),
            'best-rollout',
          ),
          button(
            'Worst',
            `Open the worst rollout of iteration ${step}`,
            () => this.actions.openIterationRollout(run.id, step, 'worst'),
            'worst-rollout',
          ),
        );
      row.append(checkpointCell, rollouts);
      table.append(row);
    }
    // What the run's kept checkpoints take on disk, as `lightning checkpoints` sums it (an APO run keeps none).
    const onDisk = keepsCheckpoints(run)
      ? [el('div', 'facts checkpoints-total', `Checkpoints: ${checkpointsTotal(this.checkpoints)} on disk`)]
      : [];
    this.table.replaceChildren(el('h3', undefined, `Iterations (${steps.length})`), ...onDisk, table);
  }
}

/** The checkpoints of a run that keeps them (GRPO, SFT); APO keeps prompt versions instead. */
function checkpointsOf(view: TrainingRunView): Checkpoint[] {
  switch (view.algorithm) {
    case 'grpo':
    case 'sft':
      return view.checkpoints;
    case 'apo':
      return [];
    default:
      return assertNever(view);
  }
}

/**
 * GRPO's iterations each ran a batch of rollouts (best and worst one click away); SFT's epochs and APO's rounds did not
 * here.
 */
function hasIterationRollouts(run: TrainingRun): boolean {
  switch (run.algorithm) {
    case 'grpo':
      return true;
    case 'sft':
    case 'apo':
      return false;
    default:
      return assertNever(run);
  }
}

/** GRPO and SFT runs keep checkpoints (their sizes and total are shown); APO keeps prompt versions. */
function keepsCheckpoints(run: TrainingRun): boolean {
  switch (run.algorithm) {
    case 'grpo':
    case 'sft':
      return true;
    case 'apo':
      return false;
    default:
      return assertNever(run);
  }
}
