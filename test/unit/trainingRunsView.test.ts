/** The panel's Training runs section, its pure parts: the metric chart's SVG, run summaries, and its messages. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { metricChartSvg, seriesOf } from '../../webview/metricChart';
import { chartedMetrics, runOutcome, runSubject, scoreText } from '../../webview/trainingRunFormat';
import { ExtensionToWebview, WebviewToExtension } from '../../webview/protocol';
import type { TrainingRun } from '../../trainer-daemon/protocol';

const run = (extra: Partial<TrainingRun> = {}): TrainingRun => ({
  id: 'run-1', algorithm: 'apo', config: { resource: 'prompt', dataset: 'sums', beam: 2 }, status: 'running', createdAt: 1, startedAt: 1, endedAt: null, error: null, cancelRequested: false, result: null, ...extra,
});
const points = [
  { step: 0, name: 'best_val_score', value: 0.5 },
  { step: 1, name: 'best_val_score', value: 0.75 },
  { step: 2, name: 'best_val_score', value: 1 },
  { step: 1, name: 'llm_calls', value: 8 },
  { step: 2, name: 'llm_calls', value: 16 },
];

describe('training runs in the panel', () => {
  it('draws one polyline per series, scores on a 0–1 axis, in step order', () => {
    const svg = metricChartSvg([...points].reverse(), { width: 126, height: 118 });
    assert.equal(svg.match(/<polyline /g)?.length, 2);
    // width 126 − 26 left − 8 right = 92 px for steps 0..2; height 118 − 8 top − 18 bottom = 92 px for 0..1.
    assert.match(svg, /data-name="best_val_score"[^>]*points="26,54 72,31 118,8"/);
    // A series outside [0, 1] gets its own range: 8 at the bottom, 16 at the top.
    assert.match(svg, /data-name="llm_calls"[^>]*points="72,100 118,8"/);
    assert.match(svg, /best_val_score 1<\/span>.*llm_calls 16<\/span>/);
  });

  it('charts only the named series, escapes names, and draws nothing without points', () => {
    assert.deepEqual([...seriesOf(points, chartedMetrics('apo')).keys()], ['best_val_score']);
    assert.equal(chartedMetrics('grpo'), undefined);
    assert.equal(metricChartSvg([]), '');
    assert.match(metricChartSvg([{ step: 0, name: '<b>&', value: 0.5 }]), /data-name="&#60;b&#62;&#38;"/);
  });

  it('summarizes a run generically: subject from its configuration, outcome from its result', () => {
    assert.equal(runSubject(run()), 'prompt · sums');
    assert.equal(runSubject(run({ algorithm: 'grpo', config: { model: 'qwen', dataset: 'math' } })), 'qwen · math');
    assert.equal(runSubject(run({ config: null })), 'run-1');
    assert.equal(runOutcome(run({ result: { seed: { valScore: 0.5 }, best: { valScore: 1 } } })), 'val 0.50 → 1.00');
    assert.equal(runOutcome(run({ status: 'failed', error: 'no val split' })), 'no val split');
    assert.equal(scoreText(null), '–');
  });

  it('validates the training-run messages both ways', () => {
    assert.ok(WebviewToExtension.safeParse({ type: 'openTrainingRun', id: 'run-1' }).success);
    assert.ok(!WebviewToExtension.safeParse({ type: 'cancelTrainingRun', id: '' }).success);
    assert.ok(ExtensionToWebview.safeParse({ type: 'trainingRunDetail', view: { run: run(), metrics: [], extra: { kind: 'none' } } }).success);
    assert.ok(!ExtensionToWebview.safeParse({ type: 'trainingRunDetail', view: { run: run(), metrics: [], extra: { kind: 'apo' } } }).success, 'APO views carry the leaderboard');
  });
});
