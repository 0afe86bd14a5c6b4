/**
 * The charts' scales: round ticks and their labels, a band clamped to its metric's range, TensorBoard's smoothing, a
 * shared x axis.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  clampBands,
  ema,
  metricDomain,
  niceStep,
  niceTicks,
  sharedStepRange,
  smoothingWeight,
  smoothPoints,
  tickLabels,
  valueAxis,
} from '../../trainer-daemon/protocol/ui/chartScale';
import { bandChartSvg, metricChartSvg } from '../../trainer-daemon/protocol/ui/chart';
import { chartSvg, formatValue, grpoCharts } from '../../trainer-daemon/protocol/ui/grpoCharts';

const labelsOf = (svg: string, kind: string): string[] =>
  [...svg.matchAll(new RegExp(`class="${kind}"[^>]*>([^<]*)<`, 'g'))].map((m) => m[1]!);

describe('chart ticks', () => {
  it('steps by 1, 2 or 5 × 10ⁿ', () => {
    assert.deepEqual(
      [0.07, 0.15, 0.3, 0.9, 4, 8, 0.00021].map((rough) => niceStep(rough)),
      [0.05, 0.2, 0.2, 1, 5, 10, 0.0002],
    );
    assert.equal(niceStep(0.3, true), 1, 'iterations step by whole numbers');
  });

  it('widens the data to whole steps, as the issue’s −0.201…0.808 axis should read', () => {
    assert.deepEqual(niceTicks(-0.201, 0.808, 3), { min: -0.5, max: 1, step: 0.5, values: [-0.5, 0, 0.5, 1] });
    assert.deepEqual(niceTicks(0.0512, 0.556, 3).values, [0, 0.2, 0.4, 0.6]);
    // A fixed range (a score's 0–1) is not widened; its round values are its ticks.
    assert.deepEqual(niceTicks(0, 1, 5, { fixed: true }).values, [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceTicks(1, 4, 5, { integer: true, fixed: true }).values, [1, 2, 3, 4]);
    // A flat series gets an axis around its value; no tick is a float's near miss (0.30000000000000004).
    assert.deepEqual(niceTicks(0.5, 0.5, 2).values, [0.45, 0.5, 0.55]);
    assert.ok(niceTicks(0.1, 0.7, 6).values.every((value) => String(value).length <= 3));
  });

  it('labels an axis alike: one number of decimals, one scale, never 7.6e-3 beside decimals', () => {
    assert.deepEqual(tickLabels(niceTicks(0.0076, 0.021, 4), 'number'), ['0.005', '0.010', '0.015', '0.020', '0.025']);
    assert.deepEqual(tickLabels(niceTicks(-0.201, 0.808, 3), 'number'), ['-0.5', '0.0', '0.5', '1.0']);
    assert.deepEqual(valueAxis(1520, 1830, 3, 'rate').labels, ['1.5k', '1.6k', '1.7k', '1.8k', '1.9k']);
    assert.deepEqual(valueAxis(3 * 2 ** 30, 3.4 * 2 ** 30, 3, 'bytes').labels, [
      '3.0 GiB',
      '3.1 GiB',
      '3.2 GiB',
      '3.3 GiB',
      '3.4 GiB',
    ]);
    assert.deepEqual(valueAxis(5.5362, 5.5381, 3, 'number').labels, ['5.536', '5.537', '5.538', '5.539']);
    assert.deepEqual(
      tickLabels({ min: -1, max: 1, step: 1, values: [-1, -0, 1] }, 'number'),
      ['-1', '0', '1'],
      'no −0',
    );
    // Summaries write small values in decimals too.
    assert.deepEqual([formatValue(0.0076, 'number'), formatValue(-0.000733, 'number')], ['0.0076', '-0.00073']);
  });
});

describe('chart bands and smoothing', () => {
  it('clamps a band to its metric’s range: a reward in [0, 1] never below 0; a user’s own reward scale is left alone', () => {
    assert.deepEqual(metricDomain('score', [0.1, 0.9]), [0, 1]);
    assert.deepEqual(metricDomain('score', [-2, 3]), [-Infinity, Infinity]);
    assert.deepEqual(metricDomain('rate', [10]), [0, Infinity]);
    assert.deepEqual(metricDomain('number', [0.2], [0, Infinity]), [0, Infinity]);
    assert.deepEqual(
      metricDomain('number', [-0.2], [0, Infinity]),
      [-Infinity, Infinity],
      'a declared range the data breaks is dropped',
    );
    assert.deepEqual(
      clampBands(
        [
          { step: 1, value: 0.1, low: -0.2, high: 0.4 },
          { step: 2, value: 0.9, low: 0.6, high: 1.2 },
          { step: 3, value: 0.5 },
        ],
        [0, 1],
      ),
      [
        { step: 1, value: 0.1, low: 0, high: 0.4 },
        { step: 2, value: 0.9, low: 0.6, high: 1 },
        { step: 3, value: 0.5 },
      ],
    );
  });

  it('smooths as TensorBoard does: a debiased moving average, 0 leaves the values, the weight kept in 0–0.99', () => {
    assert.deepEqual(ema([1, 2, 3], 0), [1, 2, 3]);
    const smoothed = ema([1, 2, 3, 4], 0.6);
    assert.equal(smoothed[0], 1, 'the first value is not pulled towards 0');
    assert.ok(Math.abs(smoothed[1]! - 1.625) < 1e-12);
    assert.ok(
      smoothed.every((value, i) => i === 0 || (value > smoothed[i - 1]! && value < i + 1)),
      'it lags a rising curve',
    );
    assert.deepEqual(ema([0.5, Number.NaN, 0.5], 0.9).map(String), ['0.5', 'NaN', '0.5']);
    assert.deepEqual(
      [
        smoothingWeight(2),
        smoothingWeight(-1),
        smoothingWeight('0.25'),
        smoothingWeight('x', 0.6),
        smoothingWeight(undefined, 0.6),
      ],
      [0.99, 0, 0.25, 0.6, 0.6],
    );
    const band = smoothPoints(
      [
        { step: 1, value: 0.2, low: 0.1, high: 0.3 },
        { step: 2, value: 0.8, low: 0.7, high: 0.9 },
      ],
      0.5,
    );
    assert.equal(band[1]!.step, 2);
    assert.ok(band[1]!.low < band[1]!.value && band[1]!.value < band[1]!.high);
  });

  it('shares one x range across small multiples (validation’s iteration 0 with the rest)', () => {
    assert.deepEqual(sharedStepRange([[{ step: 1 }, { step: 4 }], [{ step: 0 }, { step: 4 }], []]), [0, 4]);
    assert.equal(sharedStepRange([[]]), undefined);
  });
});

describe('a chart drawn with them', () => {
  const charts = grpoCharts([
    { step: 1, name: 'reward/mean', value: 0.1 },
    { step: 1, name: 'reward/std', value: 0.3 },
    { step: 2, name: 'reward/mean', value: 0.9 },
    { step: 2, name: 'reward/std', value: 0.3 },
    { step: 0, name: 'val/reward', value: 0.2 },
    { step: 2, name: 'val/reward', value: 0.6 },
    { step: 1, name: 'kl', value: 0.0076 },
    { step: 2, name: 'kl', value: 0.021 },
  ]);

  it('has round labelled ticks, axis titles, a band inside 0–1 and the shared x axis', () => {
    const reward = chartSvg(charts[0]!, { xRange: [0, 2] });
    assert.deepEqual(labelsOf(reward, 'y-tick'), ['0.0', '0.5', '1.0']);
    assert.deepEqual(labelsOf(reward, 'x-tick-label'), ['0', '1', '2']);
    assert.match(reward, /class="axis-title x-title"[^>]*>iteration</);
    assert.match(reward, /class="axis-title y-title"[^>]*>reward</);
    // The plot runs from y 6 (1.0) to 71 (0.0): the band (0.1 − 0.3 clamped to 0) reaches 71, never past it.
    const band = /class="band"[^>]*points="([^"]+)"/
      .exec(reward)![1]!
      .split(' ')
      .map((pair) => Number(pair.split(',')[1]));
    assert.equal(Math.max(...band), 71);
    assert.equal(Math.min(...band), 6);
    assert.match(reward, /data-first="0" data-last="2"/);
    const kl = chartSvg(charts[2]!, { xRange: [0, 2] });
    assert.equal(charts[2]!.axisTitle, 'KL (nats)');
    assert.ok(
      labelsOf(kl, 'y-tick').every((label) => /^\d\.\d{3}$/.test(label)),
      labelsOf(kl, 'y-tick').join(' '),
    );
  });

  it('draws the smoothed line over the raw one, faded, and a title with the value on each dot', () => {
    const raw = chartSvg(charts[1]!, { xRange: [0, 2] });
    assert.doesNotMatch(raw, /class="series raw"/);
    const smoothed = chartSvg(charts[1]!, { xRange: [0, 2], smoothing: 0.6 });
    assert.match(smoothed, /class="series raw"[^>]*stroke-opacity="0.35"/);
    assert.notEqual(
      /class="series" [^>]*points="([^"]+)"/.exec(smoothed)![1],
      /class="series" [^>]*points="([^"]+)"/.exec(raw)![1],
    );
    assert.match(smoothed, /<title>2: 0.6<\/title>/);
    assert.match(smoothed, /class="hover-line"[^>]*visibility="hidden"/);
  });

  it('keeps every label inside the chart (the last x label anchored inward)', () => {
    const svg = bandChartSvg(
      [
        { step: 1, value: 1 },
        { step: 1000, value: 2 },
      ],
      { label: 'x', format: String, width: 160, height: 96 },
    );
    for (const match of svg.matchAll(/<text class="x-tick-label" x="([\d.]+)"[^>]*text-anchor="(\w+)">(\d+)</g)) {
      const [x, anchor, text] = [Number(match[1]), match[2], match[3]!];
      const span = text.length * 6;
      const [left, right] =
        anchor === 'end' ? [x - span, x] : anchor === 'start' ? [x, x + span] : [x - span / 2, x + span / 2];
      assert.ok(left >= 0 && right <= 160, `${text} at ${x} (${anchor})`);
    }
  });

  it('gives the several-series chart (APO’s scores by round) round steps and a labelled 0–1 axis', () => {
    const svg = metricChartSvg(
      Array.from({ length: 13 }, (_, step) => ({ step, name: 'best_val_score', value: step / 12 })),
      { width: 280, height: 110 },
    );
    assert.deepEqual(labelsOf(svg, 'y-tick'), ['0.0', '0.5', '1.0']);
    assert.deepEqual(labelsOf(svg, 'x-tick-label'), ['0', '2', '4', '6', '8', '10', '12']);
  });
});
