/**
 * Small inline SVG line charts of a training run's metrics by step. `metricChartSvg` puts several
 * series in one chart (APO: scores by round): scores in [0, 1] share a 0–1 axis; other series are
 * scaled to their own range (their values are in the legend). `bandChartSvg` draws one series with
 * an optional band around it (GRPO's small multiples: reward mean ± std) and its own labelled axis.
 * Pure: they return markup from the points, so they are unit-tested in Node; the panel inserts it as
 * is. Colours are VS Code chart theme variables, so the charts follow the theme.
 */
import {
  clampBands,
  niceTicks,
  smoothingWeight,
  smoothPoints,
  valueAxis,
  type ChartUnit,
  type Domain,
} from './chartScale';

export interface MetricPointLike {
  readonly step: number;
  readonly name: string;
  readonly value: number;
}

/** A point of a single-series chart, with the band around it when there is one. */
export interface ChartPoint {
  readonly step: number;
  readonly value: number;
  readonly low?: number;
  readonly high?: number;
}

/** VS Code's chart colours (theme variables), used in turn. */
export const CHART_COLOURS = [
  '--vscode-charts-blue',
  '--vscode-charts-green',
  '--vscode-charts-orange',
  '--vscode-charts-purple',
  '--vscode-charts-red',
  '--vscode-charts-yellow',
];

const escape = (text: string): string => text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
const round = (value: number): string => String(Math.round(value * 10) / 10);

/** The series by name, each ordered by step (the last value of a step wins). */
export function seriesOf(
  points: readonly MetricPointLike[],
  names?: readonly string[],
): Map<string, { step: number; value: number }[]> {
  const byName = new Map<string, Map<number, number>>();
  for (const point of points) {
    if (names && !names.includes(point.name)) continue;
    if (!byName.has(point.name)) byName.set(point.name, new Map());
    byName.get(point.name)!.set(point.step, point.value);
  }
  const ordered = [...byName.keys()].sort((a, b) => (names ? names.indexOf(a) - names.indexOf(b) : a.localeCompare(b)));
  return new Map(
    ordered.map((name) => [
      name,
      [...byName.get(name)!.entries()].sort(([a], [b]) => a - b).map(([step, value]) => ({ step, value })),
    ]),
  );
}

/** The chart's SVG markup; an empty string when there are no points. */
export function metricChartSvg(
  points: readonly MetricPointLike[],
  options: { names?: readonly string[]; width?: number; height?: number } = {},
): string {
  const series = seriesOf(points, options.names);
  if (series.size === 0) return '';
  const width = options.width ?? 280;
  const height = options.height ?? 110;
  const pad = { left: 26, right: 8, top: 8, bottom: 18 };
  const all = [...series.values()].flat();
  const minStep = Math.min(...all.map((p) => p.step));
  const maxStep = Math.max(...all.map((p) => p.step));
  const x = (step: number): number =>
    pad.left + (maxStep === minStep ? 0.5 : (step - minStep) / (maxStep - minStep)) * (width - pad.left - pad.right);
  const plotHeight = height - pad.top - pad.bottom;
  const lines: string[] = [];
  const legend: string[] = [];
  [...series.entries()].forEach(([name, values], index) => {
    const isScore = values.every((p) => p.value >= 0 && p.value <= 1);
    const low = isScore ? 0 : Math.min(...values.map((p) => p.value));
    const high = isScore ? 1 : Math.max(...values.map((p) => p.value));
    const y = (value: number): number => pad.top + (high === low ? 0.5 : 1 - (value - low) / (high - low)) * plotHeight;
    const colour = `var(${CHART_COLOURS[index % CHART_COLOURS.length]})`;
    const coords = values.map((p) => `${round(x(p.step))},${round(y(p.value))}`);
    lines.push(
      `<polyline class="series" data-name="${escape(name)}" fill="none" stroke="${colour}" stroke-width="1.5" points="${coords.join(' ')}"/>`,
    );
    for (const coord of coords) {
      const [cx, cy] = coord.split(',');
      lines.push(`<circle cx="${cx}" cy="${cy}" r="2" fill="${colour}"/>`);
    }
    const last = values.at(-1)!.value;
    legend.push(
      `<span class="legend-item"><span class="swatch" style="background:${colour}"></span>${escape(name)} ${escape(Number.isInteger(last) ? String(last) : last.toFixed(3))}</span>`,
    );
  });
  // The 0–1 score axis at 0, 0.5 and 1; the steps at round values (1, 2, 5 × 10ⁿ), the ends' labels anchored inward.
  const border = 'var(--vscode-panel-border)';
  const yTicks = [0, 0.5, 1]
    .map((value, i) => {
      const at = round(pad.top + (1 - value) * plotHeight);
      return `<line class="grid" x1="${pad.left}" y1="${at}" x2="${width - pad.right}" y2="${at}" stroke="${border}" stroke-opacity="${i === 0 ? 1 : 0.4}"/><text class="y-tick" x="${pad.left - 4}" y="${Number(at) + 3}" text-anchor="end">${['0.0', '0.5', '1.0'][i]}</text>`;
    })
    .join('');
  const xTicks = niceTicks(minStep, maxStep, Math.max(2, Math.floor((width - pad.left - pad.right) / 40)), {
    integer: true,
    fixed: true,
  })
    .values.filter((step) => step >= minStep && step <= maxStep)
    .map((step) => {
      const at = x(step);
      const anchor = at - pad.left < 6 ? 'start' : width - pad.right - at < 6 ? 'end' : 'middle';
      return `<text class="x-tick-label" x="${round(at)}" y="${height - 4}" text-anchor="${anchor}">${step}</text>`;
    })
    .join('');
  const axis = `${yTicks}${xTicks}`;
  return `<svg class="metric-chart" role="img" aria-label="metrics by step" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">${axis}${lines.join('')}</svg><div class="legend">${legend.join('')}</div>`;
}

export interface BandChartOptions {
  /** The chart's accessible name (its text summary). */
  readonly label: string;
  /** A value as the hover read-out and the dots' titles write it. */
  readonly format: (value: number) => string;
  /** How the axis labels are written (one scale and number of decimals along the axis). */
  readonly unit?: ChartUnit;
  /**
   * The range the metric's values can take: the band is clamped to it; when both ends are finite and every
   * value lies in it (a score: 0–1), it is the y axis; else the axis is the data's, rounded to whole ticks.
   */
  readonly domain?: Domain;
  /** The x range (small multiples share one); by default the points' first and last step. */
  readonly xRange?: Domain;
  readonly xTitle?: string;
  readonly yTitle?: string;
  readonly width?: number;
  readonly height?: number;
  /** A theme chart colour variable. */
  readonly colour?: string;
  /** A second series drawn dashed over the first on the same axes (another run, to compare). */
  readonly overlay?: { readonly points: readonly ChartPoint[]; readonly colour: string; readonly label: string };
  /** About how many y ticks (round values: 1, 2, 5 × 10ⁿ); 3 by default. */
  readonly yTicks?: number;
  /** TensorBoard's smoothing weight (0–0.99): the smoothed line drawn over the raw one, which fades. */
  readonly smoothing?: number;
}

/** Roughly the width of a label's characters at the charts' 10–11 px (the left margin is sized to them). */
const CHAR_WIDTH = 6;

/**
 * One series with its band (low–high, clamped to the domain), round ticks on both axes with their grid lines
 * and labels, axis titles, optionally smoothed (the raw line faded under it) and a dashed overlay series;
 * '' without points. The svg carries its x scale (`data-first`, `data-last`, `data-left`, `data-plot-width`,
 * `data-width`) and a hidden cursor line (`.hover-line`) for hover read-outs.
 */
export function bandChartSvg(points: readonly ChartPoint[], options: BandChartOptions): string {
  if (points.length === 0) return '';
  const width = options.width ?? 160;
  const height = options.height ?? 96;
  const unit = options.unit ?? 'number';
  const overlayRaw = options.overlay?.points ?? [];
  const domain = options.domain ?? [-Infinity, Infinity];
  const smoothing = smoothingWeight(options.smoothing);
  const raw = clampBands(points, domain);
  const shown = smoothPoints(raw, smoothing);
  const overlay = smoothPoints(clampBands(overlayRaw, domain), smoothing);
  const all = [...raw, ...shown, ...overlay, ...clampBands(overlayRaw, domain)];
  const low = Math.min(...all.map((p) => Math.min(p.value, p.low ?? p.value)));
  const high = Math.max(...all.map((p) => Math.max(p.value, p.high ?? p.value)));
  const fixed = Number.isFinite(domain[0]) && Number.isFinite(domain[1]) && low >= domain[0] && high <= domain[1];
  const yAxis = fixed
    ? valueAxis(domain[0], domain[1], options.yTicks ?? 3, unit, true)
    : valueAxis(low, high, options.yTicks ?? 3, unit);
  const yLabels = yAxis.labels;
  const steps = [...points, ...overlayRaw].map((p) => p.step);
  const [first, last] = options.xRange ?? [Math.min(...steps), Math.max(...steps)];
  const pad = {
    left: 4 + (options.yTitle ? 12 : 0) + CHAR_WIDTH * Math.max(2, ...yLabels.map((text) => text.length)),
    right: 8,
    top: 6,
    bottom: 14 + (options.xTitle ? 11 : 0),
  };
  const plotWidth = width - pad.left - pad.right;
  const plotHeight = height - pad.top - pad.bottom;
  const xAxis = niceTicks(first, last, Math.max(2, Math.floor(plotWidth / 48)), { integer: true, fixed: true });
  const xValues = xAxis.values.filter((step) => step >= first && step <= last);
  const xNumber = (step: number): number =>
    pad.left + (last === first ? 0.5 : (step - first) / (last - first)) * plotWidth;
  const x = (step: number): string => round(xNumber(step));
  const yNumber = (value: number): number =>
    pad.top + (yAxis.max === yAxis.min ? 0.5 : 1 - (value - yAxis.min) / (yAxis.max - yAxis.min)) * plotHeight;
  const y = (value: number): string => round(yNumber(value));
  const colour = `var(${options.colour ?? CHART_COLOURS[0]})`;
  const banded = shown.filter((p) => p.low !== undefined && p.high !== undefined);
  const band = banded.length
    ? `<polygon class="band" fill="${colour}" fill-opacity="0.18" stroke="none" points="${[...banded.map((p) => `${x(p.step)},${y(p.high!)}`), ...[...banded].reverse().map((p) => `${x(p.step)},${y(p.low!)}`)].join(' ')}"/>`
    : '';
  const polyline = (series: readonly ChartPoint[]): string => series.map((p) => `${x(p.step)},${y(p.value)}`).join(' ');
  const rawLine =
    smoothing > 0
      ? `<polyline class="series raw" fill="none" stroke="${colour}" stroke-opacity="0.35" stroke-width="1" points="${polyline(raw)}"/>`
      : '';
  const line = `<polyline class="series" fill="none" stroke="${colour}" stroke-width="1.5" points="${polyline(shown)}"/>`;
  const dots = raw
    .map(
      (p) =>
        `<circle cx="${x(p.step)}" cy="${y(p.value)}" r="2" fill="${colour}"${smoothing > 0 ? ' fill-opacity="0.35"' : ''}><title>${escape(`${p.step}: ${options.format(p.value)}`)}</title></circle>`,
    )
    .join('');
  const overlayLine =
    options.overlay && overlay.length
      ? `<polyline class="series overlay" data-name="${escape(options.overlay.label)}" fill="none" stroke="var(${options.overlay.colour})" stroke-width="1.5" stroke-dasharray="4 3" points="${polyline(overlay)}"/>`
      : '';
  const border = 'var(--vscode-panel-border)';
  const yGrid = yAxis.values
    .map(
      (value, i) =>
        `<line class="grid" x1="${pad.left}" y1="${y(value)}" x2="${width - pad.right}" y2="${y(value)}" stroke="${border}" stroke-opacity="0.5"/><text class="y-tick" x="${pad.left - 3}" y="${round(yNumber(value) + 3)}" text-anchor="end">${escape(yLabels[i]!)}</text>`,
    )
    .join('');
  // x labels centred on their tick, the ends' anchored inward so nothing runs past the chart's edges.
  const xLabels = xValues
    .map((step) => {
      const at = xNumber(step);
      const half = (String(step).length * CHAR_WIDTH) / 2;
      const anchor = at - half < pad.left - 4 ? 'start' : at + half > width - 1 ? 'end' : 'middle';
      const textX = anchor === 'start' ? Math.max(0, at - 2) : anchor === 'end' ? Math.min(width - 1, at + 2) : at;
      return `<line class="x-tick" x1="${round(at)}" y1="${pad.top + plotHeight}" x2="${round(at)}" y2="${pad.top + plotHeight + 3}" stroke="${border}"/><text class="x-tick-label" x="${round(textX)}" y="${pad.top + plotHeight + 12}" text-anchor="${anchor}">${step}</text>`;
    })
    .join('');
  const titles =
    (options.xTitle
      ? `<text class="axis-title x-title" x="${round(pad.left + plotWidth / 2)}" y="${height - 2}" text-anchor="middle">${escape(options.xTitle)}</text>`
      : '') +
    (options.yTitle
      ? `<text class="axis-title y-title" transform="translate(9 ${round(pad.top + plotHeight / 2)}) rotate(-90)" text-anchor="middle">${escape(options.yTitle)}</text>`
      : '');
  const axis = `<line class="x-axis" x1="${pad.left}" y1="${pad.top + plotHeight}" x2="${width - pad.right}" y2="${pad.top + plotHeight}" stroke="${border}"/>`;
  const cursor = `<line class="hover-line" x1="0" y1="${pad.top}" x2="0" y2="${pad.top + plotHeight}" stroke="var(--vscode-foreground)" stroke-opacity="0.5" visibility="hidden"/>`;
  const scale = `data-first="${first}" data-last="${last}" data-left="${pad.left}" data-plot-width="${plotWidth}" data-width="${width}"`;
  return `<svg class="metric-chart band-chart" role="img" aria-label="${escape(options.label)}" viewBox="0 0 ${width} ${height}" ${scale}>${yGrid}${axis}${xLabels}${titles}${band}${rawLine}${line}${overlayLine}${dots}${cursor}</svg>`;
}

/** The step nearest to a pointer's x (in the svg's own units) on a chart drawn by bandChartSvg. */
export function stepAt(
  xInChart: number,
  scale: { first: number; last: number; left: number; plotWidth: number },
  steps: readonly number[],
): number | undefined {
  if (steps.length === 0) return undefined;
  const fraction = scale.plotWidth > 0 ? (xInChart - scale.left) / scale.plotWidth : 0;
  const target = scale.first + Math.min(1, Math.max(0, fraction)) * (scale.last - scale.first);
  return steps.reduce((best, step) => (Math.abs(step - target) < Math.abs(best - target) ? step : best), steps[0]!);
}
