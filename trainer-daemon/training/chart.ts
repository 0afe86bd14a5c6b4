/**
 * A training run's learning curves as one self-contained HTML file (inline SVG, no scripts, nothing
 * fetched): reward per iteration (sampled training rollouts and validation) and the update's loss and KL. The
 * demo writes it under `.lightning/`; the editor's panel will draw the same series live.
 */
import { metricPoints, type TrainingRunDetail } from '../protocol';

interface Series {
  readonly label: string;
  readonly color: string;
  readonly points: ReadonlyArray<{ step: number; value: number }>;
}

const WIDTH = 640;
const HEIGHT = 260;
const PAD = { left: 48, right: 16, top: 28, bottom: 32 };

function escape(text: string): string {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
}

function panel(title: string, series: readonly Series[], fixedRange?: [number, number]): string {
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) return '';
  const maxStep = Math.max(1, ...all.map((p) => p.step));
  let [low, high] = fixedRange ?? [Math.min(...all.map((p) => p.value)), Math.max(...all.map((p) => p.value))];
  if (high - low < 1e-9) [low, high] = [low - 1, high + 1];
  const x = (step: number): number => PAD.left + (step / maxStep) * (WIDTH - PAD.left - PAD.right);
  const y = (value: number): number => HEIGHT - PAD.bottom - ((value - low) / (high - low)) * (HEIGHT - PAD.top - PAD.bottom);
  const ticks = [low, (low + high) / 2, high]
    .map((v) => `<text x="${PAD.left - 6}" y="${y(v) + 4}" text-anchor="end">${Number(v.toPrecision(3))}</text><line x1="${PAD.left}" x2="${WIDTH - PAD.right}" y1="${y(v)}" y2="${y(v)}" class="grid"/>`)
    .join('');
  const lines = series
    .filter((s) => s.points.length > 0)
    .map((s) => `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${s.points.map((p) => `${x(p.step).toFixed(1)},${y(p.value).toFixed(1)}`).join(' ')}"/>` + s.points.map((p) => `<circle cx="${x(p.step).toFixed(1)}" cy="${y(p.value).toFixed(1)}" r="2.5" fill="${s.color}"><title>${escape(s.label)} @ ${p.step}: ${p.value.toFixed(3)}</title></circle>`).join(''))
    .join('');
  const legend = series.map((s, i) => `<text x="${PAD.left + i * 190}" y="16" fill="${s.color}">■ ${escape(s.label)}</text>`).join('');
  return `<svg viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" role="img" aria-label="${escape(title)}">
<text x="${WIDTH - PAD.right}" y="16" text-anchor="end" class="title">${escape(title)}</text>${legend}${ticks}
<text x="${(WIDTH + PAD.left) / 2}" y="${HEIGHT - 6}" text-anchor="middle">iteration (0 = before training; ${maxStep} iterations)</text>${lines}</svg>`;
}

export function renderChart(detail: TrainingRunDetail): string {
  const series = (name: string): Series['points'] => metricPoints(detail.metrics, name);
  const { run } = detail;
  const rewards = panel('reward', [
    { label: 'sampled reward (train rollouts)', color: '#1f77b4', points: series('reward/mean') },
    { label: 'validation reward', color: '#d62728', points: series('val/reward') },
  ], [0, 1]);
  const update = panel('policy update', [
    { label: 'loss', color: '#2ca02c', points: series('loss') },
    { label: 'KL to the reference policy', color: '#9467bd', points: series('kl') },
  ]);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lightning training run ${escape(run.id)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}svg{display:block;margin:12px 0;background:#fafafa;border:1px solid #ddd}
svg text{font:11px system-ui,sans-serif;fill:#444}svg .title{font-weight:600}.grid{stroke:#e4e4e4}</style></head>
<body><h1>Training run ${escape(run.id)}</h1>
<p>${escape(run.algorithm.toUpperCase())} · ${escape(run.status)} · ${run.step} iterations · ${detail.checkpoints.length} checkpoints</p>
${rewards}${update}
</body></html>
`;
}
