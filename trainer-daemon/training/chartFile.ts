/**
 * A training run's learning curves as one self-contained HTML file (inline SVG, no scripts, nothing
 * fetched): the same small multiples the editor's panel draws (`protocol/ui/grpoCharts.ts` shapes the
 * metrics, `protocol/ui/chart.ts` draws them), with the theme's chart colours given fixed values. The
 * demo writes it under `.lightning/`.
 */
import { checkpointsOf, type TrainingRunDetail } from '../protocol';
import { CHART_COLOURS, metricChartSvg, type MetricPointLike } from '../protocol/ui/chart';
import { sharedStepRange } from '../protocol/ui/chartScale';
import { chartSvg, grpoCharts } from '../protocol/ui/grpoCharts';

/** Fixed values for the theme variables the charts use, outside the editor. */
const COLOURS: Record<string, string> = {
  '--vscode-charts-blue': '#1f77b4',
  '--vscode-charts-green': '#2ca02c',
  '--vscode-charts-orange': '#ff7f0e',
  '--vscode-charts-purple': '#9467bd',
  '--vscode-charts-red': '#d62728',
  '--vscode-charts-yellow': '#bcbd22',
  '--vscode-panel-border': '#ccc',
};

function escape(text: string): string {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
}

export function renderChart(detail: TrainingRunDetail): string {
  const { run } = detail;
  const all = grpoCharts(detail.metrics);
  const xRange = sharedStepRange(all.map((chart) => chart.points));
  const charts = all.map((chart, index) => {
    const svg = chartSvg(chart, {
      colour: CHART_COLOURS[index % CHART_COLOURS.length],
      width: 320,
      height: 170,
      yTicks: 4,
      ...(xRange ? { xRange } : {}),
    });
    return `<figure><figcaption>${escape(chart.title)}</figcaption>${svg}<p>${escape(chart.summary)}</p></figure>`;
  });
  const variables = Object.entries(COLOURS)
    .map(([name, value]) => `${name}:${value}`)
    .join(';');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lightning training run ${escape(run.id)}</title>
<style>:root{${variables}}body{font:14px system-ui,sans-serif;margin:24px;color:#222}.charts{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0}figcaption{font-weight:600}svg{display:block;background:#fafafa;border:1px solid #ddd}svg text{font:10px system-ui,sans-serif;fill:#444}p{margin:4px 0;color:#555}</style></head>
<body><h1>Training run ${escape(run.id)}</h1>
<p>${escape(run.algorithm.toUpperCase())} · ${escape(run.status)} · ${run.step} iterations · ${checkpointsOf(detail).length} checkpoints</p>
<div class="charts">${charts.join('')}</div>
</body></html>
`;
}

/**
 * Several score curves (0–1) on one axis as a standalone SVG file (the learning bench's chart of every seed): the
 * chart module's multi-series chart with the theme colours fixed, a title and a legend.
 */
export function renderCurvesSvg(points: readonly MetricPointLike[], title: string): string {
  const width = 640;
  const height = 260;
  const names = [...new Set(points.map((p) => p.name))];
  const chart = metricChartSvg(points, { names, width, height }).split('<div class="legend">')[0]!;
  const legend = names.map((name, index) => {
    const y = 40 + index * 16;
    const colour = `var(${CHART_COLOURS[index % CHART_COLOURS.length]})`;
    return `<rect x="${width + 12}" y="${y - 9}" width="10" height="10" fill="${colour}"/><text x="${width + 28}" y="${y}">${escape(name)}</text>`;
  });
  const variables = Object.entries(COLOURS)
    .map(([name, value]) => `${name}:${value}`)
    .join(';');
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width + 200} ${height + 24}" width="${width + 200}" height="${height + 24}">
<style>svg{${variables}}text{font:11px system-ui,sans-serif;fill:#333}</style>
<rect width="100%" height="100%" fill="#fff"/><text x="8" y="16" style="font-weight:600">${escape(title)}</text>
<g transform="translate(0,24)">${chart}</g>${legend.join('')}
</svg>
`;
}
