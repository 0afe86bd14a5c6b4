/**
 * A GRPO run's charts as small multiples, one metric each: the sampled reward with its ± std band,
 * the validation reward, loss, KL, entropy, update and rollout tokens/s, and GPU memory when it was
 * recorded. This module shapes the metric points into those charts (a chart without points is left
 * out) and writes each one's text summary (first → last value), which is also the chart's
 * accessible name; an SFT run's charts likewise (its losses and validation accuracy). Pure: unit-tested in Node.
 */
import { bandChartSvg, seriesOf, type BandChartOptions, type ChartPoint, type MetricPointLike } from './chart';
import { metricDomain, type ChartUnit, type Domain } from './chartScale';

export type { ChartUnit } from './chartScale';

export interface ChartData {
  /** The metric's name in the store. */
  readonly metric: string;
  readonly title: string;
  readonly unit: ChartUnit;
  /** The y axis' title: what is measured, in what (`KL (nats)`, `tokens/s`). */
  readonly axisTitle: string;
  /** The range its values can take (its band is clamped to it): a score's [0, 1], a rate's [0, ∞). */
  readonly domain: Domain;
  readonly points: readonly ChartPoint[];
  readonly summary: string;
}

interface ChartSpec {
  readonly metric: string;
  readonly title: string;
  readonly unit: ChartUnit;
  readonly axisTitle: string;
  /** The range its values can take, beyond what the unit says (a KL, an entropy: ≥ 0). */
  readonly domain?: Domain;
  /** A metric whose value at each step is the band's half-width (std). */
  readonly band?: string;
}

const GRPO_CHARTS: readonly ChartSpec[] = [
  { metric: 'reward/mean', title: 'Reward (sampled, ± std)', unit: 'score', axisTitle: 'reward', band: 'reward/std' },
  { metric: 'val/reward', title: 'Validation reward', unit: 'score', axisTitle: 'reward' },
  { metric: 'loss', title: 'Loss', unit: 'number', axisTitle: 'loss' },
  { metric: 'kl', title: 'KL to the reference', unit: 'number', axisTitle: 'KL (nats)', domain: [0, Infinity] },
  { metric: 'entropy', title: 'Entropy', unit: 'number', axisTitle: 'nats/token', domain: [0, Infinity] },
  { metric: 'tokensPerSecond', title: 'Update tokens/s', unit: 'rate', axisTitle: 'tokens/s' },
  { metric: 'rollout/tokensPerSecond', title: 'Rollout tokens/s', unit: 'rate', axisTitle: 'tokens/s' },
  { metric: 'gpuMemoryBytes', title: 'GPU memory', unit: 'bytes', axisTitle: 'memory' },
];

/** A value as the chart's axis and summary show it. */
export function formatValue(value: number, unit: ChartUnit): string {
  if (unit === 'bytes')
    return value >= 2 ** 30 ? `${(value / 2 ** 30).toFixed(1)} GiB` : `${(value / 2 ** 20).toFixed(0)} MiB`;
  if (unit === 'rate') return value >= 1000 ? `${(value / 1000).toFixed(1)}k` : value.toFixed(0);
  if (Number.isInteger(value)) return String(value);
  // Two significant digits, in decimals (0.00073), as the axes write them: no 7.3e-4 beside 0.02.
  if (Math.abs(value) < 1e-6) return value.toExponential(1);
  if (Math.abs(value) < 0.01) return String(Number(value.toPrecision(2)));
  return Math.abs(value) >= 100 ? value.toFixed(0) : Number(value.toPrecision(3)).toString();
}

function summarize(title: string, unit: ChartUnit, points: readonly ChartPoint[]): string {
  const first = points[0]!;
  const last = points.at(-1)!;
  if (points.length === 1) return `${title}: ${formatValue(first.value, unit)} at iteration ${first.step}`;
  return `${title}: ${formatValue(first.value, unit)} → ${formatValue(last.value, unit)} (iterations ${first.step}–${last.step})`;
}

/**
 * An SFT run's charts (its iterations are epochs): the training loss, the held-out rows' loss and greedy exact-match
 * accuracy, the update's tokens/s and GPU memory.
 */
const SFT_CHARTS: readonly ChartSpec[] = [
  { metric: 'loss', title: 'Training loss', unit: 'number', axisTitle: 'nats/token', domain: [0, Infinity] },
  { metric: 'val/loss', title: 'Validation loss', unit: 'number', axisTitle: 'nats/token', domain: [0, Infinity] },
  { metric: 'val/accuracy', title: 'Validation accuracy (greedy, exact)', unit: 'score', axisTitle: 'accuracy' },
  { metric: 'tokensPerSecond', title: 'Update tokens/s', unit: 'rate', axisTitle: 'tokens/s' },
  { metric: 'gpuMemoryBytes', title: 'GPU memory', unit: 'bytes', axisTitle: 'memory' },
];

/** The charts each policy of a run with several gets (its metrics `policy/<name>/…`, protocol/policies.ts). */
const POLICY_CHARTS: readonly ChartSpec[] = [
  // Its own reward dimension's (--policy-reward), where the roles score apart; the episode's is the run-wide chart.
  { metric: 'val/reward', title: 'validation reward', unit: 'score', axisTitle: 'reward' },
  { metric: 'loss', title: 'loss', unit: 'number', axisTitle: 'loss' },
  { metric: 'kl', title: 'KL to the reference', unit: 'number', axisTitle: 'KL (nats)', domain: [0, Infinity] },
  { metric: 'entropy', title: 'entropy', unit: 'number', axisTitle: 'nats/token', domain: [0, Infinity] },
  { metric: 'transitions', title: 'transitions', unit: 'number', axisTitle: 'transitions', domain: [0, Infinity] },
];

/** The policies a run's metrics name (`policy/<name>/…`), in the order they first appear. */
export function chartedPolicies(metrics: readonly MetricPointLike[]): string[] {
  const names = new Set<string>();
  for (const { name } of metrics) {
    const match = /^policy\/([^/]+)\//.exec(name);
    if (match) names.add(match[1]!);
  }
  return [...names];
}

/**
 * The charts a GRPO run's metric points fill, in GRPO_CHARTS order, then one set per policy of a run with several;
 * non-finite values are dropped.
 */
export function grpoCharts(metrics: readonly MetricPointLike[]): ChartData[] {
  const perPolicy = chartedPolicies(metrics).flatMap((policy) =>
    POLICY_CHARTS.map((spec) => ({
      ...spec,
      metric: `policy/${policy}/${spec.metric}`,
      title: `${policy}: ${spec.title}`,
    })),
  );
  return chartsOf([...GRPO_CHARTS, ...perPolicy], metrics);
}

/** The charts an SFT run's metric points fill, in SFT_CHARTS order. */
export function sftCharts(metrics: readonly MetricPointLike[]): ChartData[] {
  return chartsOf(SFT_CHARTS, metrics);
}

function chartsOf(specs: readonly ChartSpec[], metrics: readonly MetricPointLike[]): ChartData[] {
  const series = seriesOf(metrics.filter((point) => Number.isFinite(point.value)));
  return specs.flatMap((spec) => {
    const values = series.get(spec.metric);
    if (!values?.length) return [];
    const band = spec.band ? new Map(series.get(spec.band)?.map((p) => [p.step, p.value])) : undefined;
    const points = values.map((p): ChartPoint => {
      const std = band?.get(p.step);
      return std === undefined ? p : { ...p, low: p.value - std, high: p.value + std };
    });
    const domain = metricDomain(
      spec.unit,
      values.map((p) => p.value),
      spec.domain,
    );
    return [
      {
        metric: spec.metric,
        title: spec.title,
        unit: spec.unit,
        axisTitle: spec.axisTitle,
        domain,
        points,
        summary: summarize(spec.title, spec.unit, points),
      },
    ];
  });
}

/** A live chart's points: those it has up to `afterStep`, then the newer ones fetched. */
export function mergeMetrics<P extends MetricPointLike>(
  have: readonly P[],
  newer: readonly P[],
  afterStep: number,
): P[] {
  return [...have.filter((point) => point.step <= afterStep), ...newer];
}

/**
 * A chart's SVG with its own scale, titles and read-out format; `layout`: its size, colour, shared x range, smoothing.
 */
export function chartSvg(
  chart: ChartData,
  layout: Omit<BandChartOptions, 'label' | 'format' | 'unit' | 'domain' | 'yTitle'>,
): string {
  return bandChartSvg(chart.points, {
    label: chart.summary,
    format: (value) => formatValue(value, chart.unit),
    unit: chart.unit,
    domain: chart.domain,
    yTitle: chart.axisTitle,
    xTitle: 'iteration',
    ...layout,
  });
}
