/**
 * The editor tabs' view logic, outside the browser: the waterfall timeline's layout of a
 * 2,000-span rollout plus one frame's viewport maths (the rows in view, their bars), and the
 * comparison of two 200-step rollouts (steps read as conversations, aligned, the first pair's
 * prompts and answers diffed), each against a same-run baseline: copying the same spans with
 * `structuredClone`, what postMessage does to bring them into the tab. The chart module's full-size
 * charts of a 200-iteration run are timed too. Run alone: `node --import tsx test/bench/editor.ts`.
 */
import { alignSteps, compareSteps, wordDiff } from '../../webview/editor/compareLogic';
import {
  barPixels,
  fullViewport,
  layoutTimeline,
  visibleRows,
  zoomViewport,
} from '../../webview/editor/timelineLayout';
import { runCharts } from '../../webview/editor/runCharts';
import { formatValue } from '../../trainer-daemon/protocol/ui/grpoCharts';
import { bandChartSvg } from '../../trainer-daemon/protocol/ui/chart';
import { agentRollout } from '../helpers/editorFixtures';
import { slimSpan } from '../../trainer-daemon/protocol/slimSpan';
import { Span } from '../../trainer-daemon/protocol/records';
import { fmt, median, printTable, rows } from './table';

function time(fn: () => void, runs: number): number {
  for (let i = 0; i < 3; i += 1) fn();
  const samples: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const started = performance.now();
    fn();
    samples.push(performance.now() - started);
  }
  return median(samples);
}

function timelineBenchmark(): void {
  const spans = agentRollout(1_000, { errorEvery: 25 }).slice(0, 2_000);
  let drawn = 0;
  const layoutMs = time(() => {
    const layout = layoutTimeline(spans);
    // One frame of a zoomed-in view: 40 rows of 22 px in view (a quarter down), their bars on a 900 px plot.
    const view = zoomViewport(fullViewport(layout), 0.1, 0.25, layout.durationMs);
    const { first, last } = visibleRows(22 * 500, 880, 22, layout.rows.length);
    for (let i = first; i <= last; i += 1) if (barPixels(layout.rows[i]!, view, 900)) drawn += 1;
  }, 30);
  const cloneMs = time(() => void structuredClone(spans), 30);
  rows.push({
    metric: `timeline layout of a ${spans.length}-span rollout + one frame's rows and bars (median of 30)`,
    result: `${fmt(layoutMs, 1)} ms`,
    baseline: `${fmt(cloneMs, 1)} ms (structuredClone of the same spans, as postMessage copies them)`,
    ratio: `${fmt(layoutMs / cloneMs, 2)}×`,
    target: "≤ 30 ms (of the tab's 300 ms first paint)",
    met: layoutMs <= 30 && drawn > 0 ? 'yes' : 'NO',
  });
}

function compareBenchmark(): void {
  const left = agentRollout(200);
  const right = agentRollout(200, {
    question: (i) => (i % 7 === 3 ? `Please compute ${i} + ${i} again, carefully` : `What is ${i} plus ${i}?`),
    answer: (i) => `The answer is ${i % 5 === 0 ? 2 * i + 1 : 2 * i}.`,
  });
  let pairs = 0;
  const compareMs = time(() => {
    const a = compareSteps(left);
    const b = compareSteps(right);
    const aligned = alignSteps(a, b);
    pairs = aligned.length;
    const first = aligned.find(
      (pair) => pair.left !== null && pair.right !== null && a[pair.left]!.prompt !== b[pair.right]!.prompt,
    )!;
    wordDiff(a[first.left!]!.prompt, b[first.right!]!.prompt);
    wordDiff(a[first.left!]!.answer, b[first.right!]!.answer);
  }, 20);
  const cloneMs = time(() => void structuredClone([left, right]), 20);
  rows.push({
    metric: `compare two 200-step rollouts (${left.length} + ${right.length} spans): steps read, aligned (${pairs} pairs), first differing pair diffed (median of 20)`,
    result: `${fmt(compareMs, 1)} ms`,
    baseline: `${fmt(cloneMs, 1)} ms (structuredClone of both rollouts' spans)`,
    ratio: `${fmt(compareMs / cloneMs, 2)}×`,
    target: "≤ 100 ms (of the view's 300 ms)",
    met: compareMs <= 100 && pairs >= 200 ? 'yes' : 'NO',
  });
}

/**
 * What `spans/list` with `slim: true` saves a comparison tab: the daemon slims, the extension reads and validates less.
 */
function slimBenchmark(): void {
  const spans = agentRollout(200);
  const items = Span.array();
  let bytes = { slim: 0, whole: 0 };
  const slimMs = time(() => {
    const text = JSON.stringify(spans.map(slimSpan));
    bytes = { ...bytes, slim: text.length };
    items.parse(JSON.parse(text));
  }, 10);
  const wholeMs = time(() => {
    const text = JSON.stringify(spans);
    bytes = { ...bytes, whole: text.length };
    items.parse(JSON.parse(text));
  }, 10);
  rows.push({
    metric: `a 200-step rollout's ${spans.length} spans for a comparison tab, slimmed by the daemon (${fmt(bytes.slim / 1024)} KB on the wire): slimmed, serialized, read and validated (median of 10)`,
    result: `${fmt(slimMs, 1)} ms`,
    baseline: `${fmt(wholeMs, 1)} ms (the whole spans, ${fmt(bytes.whole / 1024)} KB, serialized, read and validated)`,
    ratio: `${fmt(slimMs / wholeMs, 2)}×`,
    target: '< 1× (less than the whole spans)',
    met: slimMs < wholeMs ? 'yes' : 'NO',
  });
}

function chartBenchmark(): void {
  const names = [
    'reward/mean',
    'reward/std',
    'val/reward',
    'loss',
    'kl',
    'entropy',
    'tokensPerSecond',
    'gpuMemoryBytes',
  ];
  const metrics = Array.from({ length: 200 }, (_, step) =>
    names.map((name, i) => ({ step: step + 1, name, value: Math.sin(step / 10 + i) + i, timeMs: 0 })),
  ).flat();
  let bytes = 0;
  const chartsMs = time(() => {
    bytes = 0;
    for (const chart of runCharts('grpo', metrics))
      bytes += bandChartSvg(chart.points, {
        label: chart.summary,
        format: (v) => formatValue(v, chart.unit),
        width: 560,
        height: 220,
        yTicks: 3,
        overlay: { points: chart.points, colour: '--vscode-charts-red', label: 'other' },
      }).length;
  }, 20);
  const cloneMs = time(() => void structuredClone(metrics), 20);
  rows.push({
    metric: `run tab's charts: 7 full-size charts of a 200-iteration GRPO run, another run overlaid (median of 20; ${fmt(bytes / 1024)} KB of SVG)`,
    result: `${fmt(chartsMs, 1)} ms`,
    baseline: `${fmt(cloneMs, 1)} ms (structuredClone of the run's ${metrics.length} metric points)`,
    ratio: `${fmt(chartsMs / cloneMs, 2)}×`,
    target: '≤ 50 ms',
    met: chartsMs <= 50 ? 'yes' : 'NO',
  });
}

export function editorBenchmark(): void {
  timelineBenchmark();
  compareBenchmark();
  slimBenchmark();
  chartBenchmark();
}

if (process.argv[1]?.endsWith('editor.ts')) {
  editorBenchmark();
  printTable();
}
