/**
 * Small inline SVG line charts of a training run's metrics by step. `metricChartSvg` puts several
 * series in one chart (APO: scores by round): scores in [0, 1] share a 0–1 axis; other series are
 * scaled to their own range (their values are in the legend). `bandChartSvg` draws one series with
 * an optional band around it (GRPO's small multiples: reward mean ± std) and its own labelled axis.
 * Pure: they return markup from the points, so they are unit-tested in Node; the panel inserts it as
 * is. Colours are VS Code chart theme variables, so the charts follow the theme.
 */
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
  const axis = `<line x1="${pad.left}" y1="${pad.top + plotHeight}" x2="${width - pad.right}" y2="${pad.top + plotHeight}" stroke="var(--vscode-panel-border)"/>
<text x="${pad.left - 4}" y="${pad.top + 4}" text-anchor="end">1</text><text x="${pad.left - 4}" y="${pad.top + plotHeight}" text-anchor="end">0</text>
<text x="${pad.left}" y="${height - 4}">${minStep}</text><text x="${width - pad.right}" y="${height - 4}" text-anchor="end">${maxStep}</text>`;
  return `<svg class="metric-chart" role="img" aria-label="metrics by step" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">${axis}${lines.join('')}</svg><div class="legend">${legend.join('')}</div>`;
}

export interface BandChartOptions {
  /** The chart's accessible name (its text summary). */
  readonly label: string;
  readonly format: (value: number) => string;
  /** A fixed value range (scores: 0–1) when every value and band lies in it; else the data's own range. */
  readonly range?: readonly [number, number];
  readonly width?: number;
  readonly height?: number;
  /** A theme chart colour variable. */
  readonly colour?: string;
  /** A second series drawn dashed over the first on the same axes (another run, to compare). */
  readonly overlay?: { readonly points: readonly ChartPoint[]; readonly colour: string; readonly label: string };
  /** Labelled grid lines on the y axis between min and max (full-size charts); 0: only min and max. */
  readonly yTicks?: number;
}

/**
 * One series with its band (low–high), min and max on the y axis, first and last step on the x axis
 * (and, for full-size charts, grid lines and a dashed overlay series); '' without points. The svg
 * carries its x scale (`data-first`, `data-last`, `data-left`, `data-plot-width`) for hover read-outs.
 */
export function bandChartSvg(points: readonly ChartPoint[], options: BandChartOptions): string {
  if (points.length === 0) return '';
  const width = options.width ?? 160;
  const height = options.height ?? 80;
  // Room on the left for a six-character axis label (0.0539, 1.5k, 3.0 GiB) at the panel's 10 px.
  const pad = { left: 42, right: 6, top: 6, bottom: 16 };
  const overlay = options.overlay?.points ?? [];
  const all = [...points, ...overlay];
  const lows = all.map((p) => Math.min(p.value, p.low ?? p.value));
  const highs = all.map((p) => Math.max(p.value, p.high ?? p.value));
  const fits =
    options.range !== undefined && Math.min(...lows) >= options.range[0] && Math.max(...highs) <= options.range[1];
  const [low, high] = fits ? options.range! : [Math.min(...lows), Math.max(...highs)];
  const first = overlay.length ? Math.min(points[0]!.step, overlay[0]!.step) : points[0]!.step;
  const last = overlay.length ? Math.max(points.at(-1)!.step, overlay.at(-1)!.step) : points.at(-1)!.step;
  const plotWidth = width - pad.left - pad.right;
  const plotHeight = height - pad.top - pad.bottom;
  const x = (step: number): string =>
    round(pad.left + (last === first ? 0.5 : (step - first) / (last - first)) * plotWidth);
  const y = (value: number): string =>
    round(pad.top + (high === low ? 0.5 : 1 - (value - low) / (high - low)) * plotHeight);
  const colour = `var(${options.colour ?? CHART_COLOURS[0]})`;
  const banded = points.filter((p) => p.low !== undefined && p.high !== undefined);
  const band = banded.length
    ? `<polygon class="band" fill="${colour}" fill-opacity="0.18" stroke="none" points="${[...banded.map((p) => `${x(p.step)},${y(p.high!)}`), ...[...banded].reverse().map((p) => `${x(p.step)},${y(p.low!)}`)].join(' ')}"/>`
    : '';
  const line = `<polyline class="series" fill="none" stroke="${colour}" stroke-width="1.5" points="${points.map((p) => `${x(p.step)},${y(p.value)}`).join(' ')}"/>`;
  const dots = points.map((p) => `<circle cx="${x(p.step)}" cy="${y(p.value)}" r="2" fill="${colour}"/>`).join('');
  const overlayLine =
    options.overlay && overlay.length
      ? `<polyline class="series overlay" data-name="${escape(options.overlay.label)}" fill="none" stroke="var(${options.overlay.colour})" stroke-width="1.5" stroke-dasharray="4 3" points="${overlay.map((p) => `${x(p.step)},${y(p.value)}`).join(' ')}"/>`
      : '';
  // A range narrower than the format's precision (entropy 5.538 → 5.536) gets more digits, so its ends differ.
  let [top, bottom] = [options.format(high), options.format(low)];
  for (let digits = 4; top === bottom && high !== low && digits <= 8; digits += 1)
    [top, bottom] = [high, low].map((v) => String(Number(v.toPrecision(digits)))) as [string, string];
  const tickValues = Array.from(
    { length: high === low ? 0 : (options.yTicks ?? 0) },
    (_, i) => low + ((high - low) * (i + 1)) / ((options.yTicks ?? 0) + 1),
  );
  // Grid labels that the format rounds alike (1.1k, 1.1k) get the digits that tell them apart.
  let tickLabels = tickValues.map(options.format);
  for (let digits = 3; new Set([top, ...tickLabels, bottom]).size < tickLabels.length + 2 && digits <= 8; digits += 1)
    tickLabels = tickValues.map((v) => String(Number(v.toPrecision(digits))));
  const grid = tickValues
    .map(
      (value, i) =>
        `<line class="grid" x1="${pad.left}" y1="${y(value)}" x2="${width - pad.right}" y2="${y(value)}" stroke="var(--vscode-panel-border)" stroke-opacity="0.5"/><text x="${pad.left - 3}" y="${Number(y(value)) + 3}" text-anchor="end">${escape(tickLabels[i]!)}</text>`,
    )
    .join('');
  const axis = `<line x1="${pad.left}" y1="${pad.top + plotHeight}" x2="${width - pad.right}" y2="${pad.top + plotHeight}" stroke="var(--vscode-panel-border)"/>
<text x="${pad.left - 3}" y="${pad.top + 6}" text-anchor="end">${escape(top)}</text><text x="${pad.left - 3}" y="${pad.top + plotHeight}" text-anchor="end">${escape(bottom)}</text>
<text x="${pad.left}" y="${height - 3}">${first}</text><text x="${width - pad.right}" y="${height - 3}" text-anchor="end">${last}</text>`;
  const scale = `data-first="${first}" data-last="${last}" data-left="${pad.left}" data-plot-width="${plotWidth}" data-width="${width}"`;
  return `<svg class="metric-chart band-chart" role="img" aria-label="${escape(options.label)}" viewBox="0 0 ${width} ${height}" ${scale}>${axis}${grid}${band}${line}${overlayLine}${dots}</svg>`;
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
