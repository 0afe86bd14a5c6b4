/** The panel's Training runs section, its pure parts: the metric chart's SVG, run summaries, and its messages. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bandChartSvg, metricChartSvg, seriesOf } from '../../trainer-daemon/protocol/ui/chart';
import { formatValue, grpoCharts, mergeMetrics, sftCharts } from '../../trainer-daemon/protocol/ui/grpoCharts';
import { placementOf } from '../../trainer-daemon/protocol/placement';
import { isResumable } from '../../trainer-daemon/protocol/status';
import { runCharts } from '../../webview/editor/runCharts';
import {
  chartedMetrics,
  runOutcome,
  runSubject,
  runTitle,
  scoreText,
} from '../../trainer-daemon/protocol/ui/trainingRunFormat';
import { tabTitle } from '../../trainer-daemon/protocol/ui/editorTarget';
import { ExtensionToWebview, WebviewToExtension } from '../../trainer-daemon/protocol/ui/panelMessages';
import {
  SftConfig,
  type ApoResult,
  type ApoTrainingRun,
  type GrpoTrainingRun,
  type SftConfigInput,
  type TrainingRun,
} from '../../trainer-daemon/protocol';
import { testApoConfig, testGrpoConfig } from '../helpers/trainingConfigs';

const record = {
  id: 'run-1',
  status: 'running',
  createdAt: 1,
  startedAt: 1,
  endedAt: null,
  error: null,
  errorKind: null,
  cancelRequested: false,
  result: null,
} as const;
const run = (extra: Partial<ApoTrainingRun> = {}): TrainingRun => ({
  ...record,
  algorithm: 'apo',
  config: testApoConfig({ beam: 2 }),
  ...extra,
});
const apoResult = (scores: { seed: number; best: number }): ApoResult => ({
  runId: 'run-1',
  resource: 'prompt',
  diff: '',
  roundsCompleted: 1,
  llmCalls: 4,
  rollouts: 8,
  stopReason: 'completed',
  skipped: [],
  seed: { candidateId: 'c-0', version: 1, prompt: 'seed', valScore: scores.seed },
  best: { candidateId: 'c-1', version: 2, prompt: 'best', valScore: scores.best },
});
const grpoRun = (extra: Partial<GrpoTrainingRun> = {}): TrainingRun => ({
  ...record,
  algorithm: 'grpo',
  config: testGrpoConfig(),
  ...extra,
});
/** A run as a detail carries it: with its last step and latest metrics. */
const summary = (r: TrainingRun): TrainingRun & { step: number; latest: Record<string, number> } => ({
  ...r,
  step: 0,
  latest: {},
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
    assert.equal(runSubject(grpoRun({ config: testGrpoConfig({ dataset: 'tools' }) })), 'tiny · tools');
    assert.equal(
      runSubject(
        grpoRun({
          config: testGrpoConfig({ model: { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B-Instruct' }, dataset: 'tools' }),
        }),
      ),
      'Qwen/Qwen2.5-0.5B-Instruct · tools',
    );
    assert.equal(runOutcome(run({ result: apoResult({ seed: 0.5, best: 1 }) })), 'val 0.50 → 1.00');
    // Its name in a tab's title or a header: what it trains, on what, and when; never its id.
    const at = new Date(2026, 11, 3, 14, 3, 12).getTime();
    const made = grpoRun({ id: 'train-98c54a16730b', createdAt: at, config: testGrpoConfig({ dataset: 'tools' }) });
    assert.equal(runTitle(made, at), 'GRPO tiny on tools · 14:03:12');
    assert.equal(runTitle(run({ createdAt: at }), at), 'APO prompt on sums · 14:03:12');
    const tab = {
      target: { kind: 'run' as const, runId: made.id },
      preview: false,
      selectedSpanId: null,
      overlayRunId: null,
    };
    assert.equal(tabTitle(tab), 'Training run train-98c54a…', 'before the run is read');
    assert.equal(tabTitle(tab, [], made), runTitle(made));
    assert.ok(!tabTitle(tab, [], made).includes(made.id));
    assert.equal(
      tabTitle(tab, [], { ...made, id: 'another' }),
      'Training run train-98c54a…',
      "another run's name is not its",
    );
    assert.equal(runOutcome(run({ status: 'failed', error: 'no val split' })), 'no val split');
    assert.equal(scoreText(null), '–');
  });

  it('validates the training-run messages both ways', () => {
    assert.ok(WebviewToExtension.safeParse({ type: 'openTrainingRun', id: 'run-1' }).success);
    assert.ok(!WebviewToExtension.safeParse({ type: 'cancelTrainingRun', id: '' }).success);
    assert.ok(
      ExtensionToWebview.safeParse({
        type: 'trainingRunDetail',
        view: { algorithm: 'grpo', run: summary(grpoRun()), metrics: [], checkpoints: [] },
      }).success,
    );
    assert.ok(
      !ExtensionToWebview.safeParse({
        type: 'trainingRunDetail',
        view: { algorithm: 'ppo', run: { ...summary(grpoRun()), algorithm: 'ppo' }, metrics: [], checkpoints: [] },
      }).success,
      'a run is one of the algorithms',
    );
    assert.ok(
      !ExtensionToWebview.safeParse({
        type: 'trainingRunDetail',
        view: { algorithm: 'apo', run: summary(run()), metrics: [], checkpoints: [] },
      }).success,
      'APO views carry the leaderboard, not checkpoints',
    );
    assert.ok(
      !ExtensionToWebview.safeParse({
        type: 'trainingRunDetail',
        view: { algorithm: 'grpo', run: summary(run()), metrics: [], checkpoints: [] },
      }).success,
      'the detail is the algorithm of its run',
    );
    assert.ok(
      ExtensionToWebview.safeParse({
        type: 'trainingRunDetail',
        view: { algorithm: 'apo', run: summary(run()), metrics: [], candidates: [] },
      }).success,
    );
  });
});

describe('a GRPO run in the panel: small multiples', () => {
  const grpo = [
    { step: 0, name: 'val/reward', value: 0.25 },
    { step: 1, name: 'reward/mean', value: 0.5 },
    { step: 1, name: 'reward/std', value: 0.25 },
    { step: 2, name: 'reward/mean', value: 0.75 },
    { step: 2, name: 'reward/std', value: 0.125 },
    { step: 2, name: 'val/reward', value: 1 },
    { step: 1, name: 'loss', value: 0.5 },
    { step: 2, name: 'loss', value: Number.NaN },
    { step: 1, name: 'tokensPerSecond', value: 1520 },
    { step: 2, name: 'tokensPerSecond', value: 1830 },
    { step: 1, name: 'clipFraction', value: 0.1 },
  ];

  it('shapes one chart per metric recorded, in order, the reward with its ± std band; GPU memory only when recorded', () => {
    const charts = grpoCharts(grpo);
    assert.deepEqual(
      charts.map((c) => c.metric),
      ['reward/mean', 'val/reward', 'loss', 'tokensPerSecond'],
    );
    assert.deepEqual(charts[0]!.points, [
      { step: 1, value: 0.5, low: 0.25, high: 0.75 },
      { step: 2, value: 0.75, low: 0.625, high: 0.875 },
    ]);
    assert.deepEqual(charts[1]!.points, [
      { step: 0, value: 0.25 },
      { step: 2, value: 1 },
    ]);
    assert.deepEqual(
      charts.map((c) => c.summary),
      [
        'Reward (sampled, ± std): 0.5 → 0.75 (iterations 1–2)',
        'Validation reward: 0.25 → 1 (iterations 0–2)',
        'Loss: 0.5 at iteration 1',
        'Update tokens/s: 1.5k → 1.8k (iterations 1–2)',
      ],
    );
    const withGpu = grpoCharts([...grpo, { step: 1, name: 'gpuMemoryBytes', value: 3 * 2 ** 30 }]);
    assert.equal(withGpu.at(-1)!.summary, 'GPU memory: 3.0 GiB at iteration 1');
    assert.deepEqual(
      [
        formatValue(-0.000733, 'number'),
        formatValue(0.0826, 'number'),
        formatValue(5.5381, 'number'),
        formatValue(512 * 2 ** 20, 'bytes'),
      ],
      ['-0.00073', '0.0826', '5.54', '512 MiB'],
    );
    assert.deepEqual(grpoCharts([]), []);
  });

  it('draws the band under the line on a 0–1 axis for scores, with the summary as the accessible name', () => {
    const [reward] = grpoCharts(grpo);
    const svg = bandChartSvg(reward!.points, {
      label: reward!.summary,
      format: (v) => formatValue(v, 'score'),
      unit: 'score',
      domain: [0, 1],
      width: 142,
      height: 120,
    });
    // Labels "0.0".."1.0": 4 + 6 × 3 = 22 px on the left, 8 on the right: 112 px for steps 1..2; 120 − 6 − 14 = 100 px
    // for 0..1.
    assert.match(svg, /class="series"[^>]*points="22,56 134,31"/);
    assert.match(svg, /<polygon class="band"[^>]*points="22,31 134,18.5 134,43.5 22,81"/);
    assert.match(svg, /role="img" aria-label="Reward \(sampled, ± std\): 0.5 → 0.75 \(iterations 1–2\)"/);
    assert.deepEqual(
      [...svg.matchAll(/class="y-tick"[^>]*>([^<]*)</g)].map((m) => m[1]),
      ['0.0', '0.5', '1.0'],
    );
    // A series outside the range gets its own axis, round: 1.5k to 1.9k.
    const rate = bandChartSvg(
      [
        { step: 1, value: 1520 },
        { step: 2, value: 1830 },
      ],
      { label: 'rate', format: (v) => formatValue(v, 'rate'), unit: 'rate', domain: [0, 1] },
    );
    assert.deepEqual(
      [...rate.matchAll(/class="y-tick"[^>]*>([^<]*)</g)].map((m) => m[1]),
      ['1.5k', '1.6k', '1.7k', '1.8k', '1.9k'],
    );
    // A range narrower than a format's precision gets the digits its step needs.
    const entropy = bandChartSvg(
      [
        { step: 1, value: 5.5381 },
        { step: 2, value: 5.5362 },
      ],
      { label: 'entropy', format: (v) => formatValue(v, 'number') },
    );
    assert.deepEqual(
      [...entropy.matchAll(/class="y-tick"[^>]*>([^<]*)</g)].map((m) => m[1]),
      ['5.536', '5.537', '5.538', '5.539'],
    );
    assert.equal(bandChartSvg([], { label: 'x', format: String }), '');
  });

  it('merges a live refresh: the points up to afterStep kept, the newer ones (and late ones of the last step) taken', () => {
    const have = [
      { step: 1, name: 'loss', value: 1 },
      { step: 2, name: 'loss', value: 0.5 },
    ];
    const newer = [
      { step: 2, name: 'loss', value: 0.5 },
      { step: 2, name: 'val/reward', value: 1 },
      { step: 3, name: 'loss', value: 0.25 },
    ];
    assert.deepEqual(mergeMetrics(have, newer, 1), [have[0], ...newer]);
  });

  it('validates the GRPO view and the new messages', () => {
    const checkpoint = {
      id: 'ck-1',
      runId: 'run-1',
      step: 1,
      path: '/x',
      metrics: { 'reward/mean': 0.5 },
      createdAt: 1,
    };
    const parsed = ExtensionToWebview.safeParse({
      type: 'trainingRunDetail',
      view: { algorithm: 'grpo', run: summary(grpoRun()), metrics: [], checkpoints: [checkpoint] },
    });
    assert.ok(parsed.success);
    assert.equal(
      parsed.data.type === 'trainingRunDetail' && parsed.data.view.afterStep,
      -1,
      'a whole series unless said otherwise',
    );
    assert.ok(ExtensionToWebview.safeParse({ type: 'showTrainingRun', id: 'run-1' }).success);
    assert.ok(WebviewToExtension.safeParse({ type: 'openTrainingRun', id: 'run-1', afterStep: 3 }).success);
    assert.ok(!WebviewToExtension.safeParse({ type: 'openTrainingRun', id: 'run-1', afterStep: -2 }).success);
    assert.ok(WebviewToExtension.safeParse({ type: 'useCheckpoint', checkpointId: 'ck-1' }).success);
    assert.ok(!WebviewToExtension.safeParse({ type: 'useCheckpoint', checkpointId: '' }).success);
    assert.ok(WebviewToExtension.safeParse({ type: 'resumeTrainingRun', id: 'run-1' }).success);
  });
});

describe('an SFT run in the panel and the run tab', () => {
  const sftRun = (config: Partial<SftConfigInput> = {}): TrainingRun => ({
    ...record,
    algorithm: 'sft',
    config: SftConfig.parse({ algorithm: 'sft', model: { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B' }, ...config }),
  });

  it('says what it learns from, and is a daemon-driven run with checkpoints', () => {
    assert.equal(runSubject(sftRun()), 'Qwen/Qwen2.5-0.5B · rollouts rated ≥ 1');
    assert.equal(
      runSubject(sftRun({ dataset: 'tools', minReward: 0.5 })),
      'Qwen/Qwen2.5-0.5B · tools · rollouts rated ≥ 0.5',
    );
    assert.equal(runOutcome({ ...sftRun(), status: 'failed', error: 'boom' }), 'boom');
    assert.equal(placementOf(sftRun()), 'local');
    assert.ok(isResumable({ ...sftRun(), status: 'cancelled' }));
    assert.ok(!isResumable({ ...run(), status: 'cancelled' }), 'APO runs again instead');
    const view = { algorithm: 'sft', run: summary(sftRun()), metrics: [], afterStep: -1, checkpoints: [] };
    assert.ok(ExtensionToWebview.safeParse({ type: 'trainingRunDetail', view }).success);
  });

  it('charts the training loss, the validation loss and accuracy by epoch, as the run tab does', () => {
    const metrics = [
      { step: 0, name: 'val/loss', value: 3.2 },
      { step: 0, name: 'val/accuracy', value: 0 },
      { step: 0, name: 'rows/train', value: 40 },
      { step: 1, name: 'loss', value: 1.5 },
      { step: 1, name: 'val/loss', value: 1.1 },
      { step: 1, name: 'val/accuracy', value: 0.5 },
      { step: 1, name: 'tokensPerSecond', value: 1200 },
    ].map((point) => ({ ...point, timeMs: 0 }));
    const charts = sftCharts(metrics);
    assert.deepEqual(
      charts.map((chart) => [chart.metric, chart.unit]),
      [
        ['loss', 'number'],
        ['val/loss', 'number'],
        ['val/accuracy', 'score'],
        ['tokensPerSecond', 'rate'],
      ],
    );
    assert.equal(charts[1]!.summary, 'Validation loss: 3.2 → 1.1 (iterations 0–1)');
    assert.deepEqual(runCharts('sft', metrics), charts);
    assert.deepEqual(
      runCharts('grpo', metrics).map((chart) => chart.metric),
      ['loss', 'tokensPerSecond'],
    );
  });
});
