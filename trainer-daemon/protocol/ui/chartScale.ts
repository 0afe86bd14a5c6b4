/**
 * The charts' scales, pure and browser-safe (no Node, no zod): round axis ticks (1, 2, 5 × 10ⁿ), tick labels
 * formatted alike along an axis (one number of decimals, one unit: never `7.6e-3` beside `0.02`), a metric's
 * band clamped to the range its values can take (a reward in [0, 1] never below 0), one x range shared by
 * small multiples, and TensorBoard's smoothing (an exponential moving average, debiased at the start). The
 * chart module (chart.ts) draws with them; the panel, the run tab and the demo's HTML file share them.
 */

/** How a metric's values read: a score in [0, 1], a plain number, a rate (per second), a size in bytes. */
export type ChartUnit = 'score' | 'number' | 'rate' | 'bytes';

/** A closed range of values; an end may be infinite (a count is ≥ 0 but has no top). */
export type Domain = readonly [number, number];

export interface AxisTicks {
  /** The axis' ends: the data's range widened to whole steps (or the fixed range asked for). */
  readonly min: number;
  readonly max: number;
  /** The distance between ticks: 1, 2 or 5 × 10ⁿ. */
  readonly step: number;
  readonly values: readonly number[];
}

/**
 * The round step (1, 2 or 5 × 10ⁿ) nearest to `rough` (the cut-offs between them are their geometric means, so
 * an axis gets about as many ticks as asked); at least 1 for whole numbers (iterations).
 */
export function niceStep(rough: number, integer = false): number {
  if (!(rough > 0) || !Number.isFinite(rough)) return 1;
  const power = 10 ** Math.floor(Math.log10(rough));
  const error = rough / power;
  const multiple = error >= Math.sqrt(50) ? 10 : error >= Math.sqrt(10) ? 5 : error >= Math.sqrt(2) ? 2 : 1;
  const step = Number((multiple * power).toPrecision(12));
  return integer ? Math.max(1, Math.round(step)) : step;
}

/** The next round step up: 1 → 2 → 5 → 10 (× 10ⁿ). */
function largerStep(step: number): number {
  const power = 10 ** Math.floor(Math.log10(step) + 1e-9);
  const mantissa = Math.round(step / power);
  return Number(((mantissa < 2 ? 2 : mantissa < 5 ? 5 : 10) * power).toPrecision(12));
}

/**
 * About `count` round ticks covering [low, high]. The axis' ends are widened to whole steps, unless `fixed`
 * (a score's 0–1 axis, a shared iteration range): then the ticks are the round values inside it. A flat
 * series (low = high) gets an axis around its value.
 */
export function niceTicks(
  low: number,
  high: number,
  count = 5,
  options: { integer?: boolean; fixed?: boolean } = {},
): AxisTicks {
  const integer = options.integer ?? false;
  if (!Number.isFinite(low) || !Number.isFinite(high)) return { min: 0, max: 1, step: 1, values: [0, 1] };
  if (high < low) [low, high] = [high, low];
  if (high === low) {
    const spread = integer ? 1 : low === 0 ? 1 : Math.abs(low) * 0.1;
    [low, high] = [low - spread, high + spread];
    if (integer && low < 0 && high - 1 >= 0) low = 0;
  }
  const snap = (value: number): number => Number(value.toPrecision(12));
  let step = niceStep((high - low) / Math.max(1, count), integer);
  // Never more than two ticks past the count asked for (a narrow chart has room for few labels).
  const ticksAt = (size: number): number => Math.ceil(high / size - 1e-9) - Math.floor(low / size + 1e-9) + 1;
  while (ticksAt(step) > count + 2) step = largerStep(step);
  const min = options.fixed ? low : snap(Math.floor(low / step + 1e-9) * step);
  const max = options.fixed ? high : snap(Math.ceil(high / step - 1e-9) * step);
  const values: number[] = [];
  for (let k = Math.ceil(min / step - 1e-9); k * step <= max + step * 1e-9 && values.length < 100; k += 1)
    values.push(snap(k * step) || 0);
  return { min, max, step, values };
}

/** Decimals that a step of this size needs (0.05 → 2, 20 → 0). */
function decimalsFor(step: number): number {
  if (!(step > 0)) return 0;
  let decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  // A step such as 0.25 (never produced by niceStep, but a fixed range may end there) keeps its digits.
  while (decimals < 12 && Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6) decimals += 1;
  return decimals;
}

const BYTE_UNITS: ReadonlyArray<readonly [string, number]> = [
  ['GiB', 2 ** 30],
  ['MiB', 2 ** 20],
  ['KiB', 2 ** 10],
  ['B', 1],
];

/** The scale an axis' labels are written in: a divisor and a suffix (k for thousands, GiB for bytes…). */
export function axisScale(ticks: Pick<AxisTicks, 'min' | 'max'>, unit: ChartUnit): { divisor: number; suffix: string } {
  const largest = Math.max(Math.abs(ticks.min), Math.abs(ticks.max));
  if (unit === 'bytes') {
    const [suffix, divisor] = BYTE_UNITS.find(([, size]) => largest >= size) ?? ['B', 1];
    return { divisor, suffix: ` ${suffix}` };
  }
  if (unit === 'score') return { divisor: 1, suffix: '' };
  if (largest >= 1e9) return { divisor: 1e9, suffix: 'G' };
  if (largest >= 1e6) return { divisor: 1e6, suffix: 'M' };
  if (largest >= 1e4 || (unit === 'rate' && largest >= 1e3)) return { divisor: 1e3, suffix: 'k' };
  return { divisor: 1, suffix: '' };
}

/** An axis' tick labels, written alike: one scale (k, MiB…) and one number of decimals, from its step. */
export function tickLabels(ticks: AxisTicks, unit: ChartUnit): string[] {
  const { divisor, suffix } = axisScale(ticks, unit);
  const decimals = decimalsFor(ticks.step / divisor);
  // Past six decimals the axis is written in powers of ten, every label alike (a KL of 2e-7).
  if (decimals > 6)
    return ticks.values.map((value) => (value === 0 ? '0' : `${(value / divisor).toExponential(1)}${suffix}`));
  return ticks.values.map((value) => {
    const text = (value / divisor).toFixed(decimals);
    return `${/^-0(?:\.0+)?$/.test(text) ? text.slice(1) : text}${suffix}`;
  });
}

/**
 * A value axis: round ticks in the unit its labels are written in (bytes step by 0.5 GiB, not by 5 × 10⁸ bytes),
 * their labels alike, the ticks back in the values' own unit.
 */
export function valueAxis(
  low: number,
  high: number,
  count: number,
  unit: ChartUnit,
  fixed = false,
): AxisTicks & { readonly labels: readonly string[] } {
  const { divisor } = axisScale({ min: low, max: high }, unit);
  const scaled = niceTicks(low / divisor, high / divisor, count, { fixed });
  const snap = (value: number): number => Number((value * divisor).toPrecision(12));
  const ticks: AxisTicks = {
    min: snap(scaled.min),
    max: snap(scaled.max),
    step: snap(scaled.step),
    values: scaled.values.map(snap),
  };
  return { ...ticks, labels: tickLabels(ticks, unit) };
}

/**
 * The range a metric's values can take, for its band: a score in [0, 1] (when its values lie there: a reward
 * outside it is the user's own scale), a rate or a size ≥ 0, else `declared` (a KL, an entropy: ≥ 0), else none.
 */
export function metricDomain(unit: ChartUnit, values: readonly number[], declared?: Domain): Domain {
  if (unit === 'score' && values.every((value) => value >= 0 && value <= 1)) return [0, 1];
  if (unit === 'rate' || unit === 'bytes') return [0, Infinity];
  if (declared && values.every((value) => value >= declared[0] && value <= declared[1])) return declared;
  return [-Infinity, Infinity];
}

/** A value kept inside a domain. */
export function clamp(value: number, domain: Domain): number {
  return Math.min(domain[1], Math.max(domain[0], value));
}

/** A chart point with its band, as chart.ts draws it. */
export interface BandPoint {
  readonly step: number;
  readonly value: number;
  readonly low?: number;
  readonly high?: number;
}

/** Points whose band (mean ± std) is clamped to the domain: a reward's band stops at 0 and 1. */
export function clampBands<P extends BandPoint>(points: readonly P[], domain: Domain): P[] {
  return points.map((point) =>
    point.low === undefined && point.high === undefined
      ? point
      : {
          ...point,
          ...(point.low === undefined ? {} : { low: clamp(point.low, domain) }),
          ...(point.high === undefined ? {} : { high: clamp(point.high, domain) }),
        },
  );
}

/** The smoothing weight's range, as TensorBoard's slider: 0 (raw) to 0.99. */
export const MAX_SMOOTHING = 0.99;
/** TensorBoard's default weight; the raw curve is drawn too, faded, so nothing is hidden by it. */
export const DEFAULT_SMOOTHING = 0.6;

/** A smoothing weight read from anywhere (saved state, a slider): a number in [0, 0.99], else `fallback`. */
export function smoothingWeight(value: unknown, fallback = 0): number {
  const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof number === 'number' && Number.isFinite(number)
    ? Math.min(MAX_SMOOTHING, Math.max(0, number))
    : fallback;
}

/**
 * TensorBoard's smoothing: an exponential moving average with weight `weight` (0: the values as they are),
 * debiased so the first values are not pulled towards 0. Non-finite values pass through and do not count.
 */
export function ema(values: readonly number[], weight: number): number[] {
  const w = smoothingWeight(weight);
  if (w === 0) return [...values];
  let last = 0;
  let count = 0;
  return values.map((value) => {
    if (!Number.isFinite(value)) return value;
    last = last * w + (1 - w) * value;
    count += 1;
    return last / (1 - w ** count);
  });
}

/** Points smoothed: the value and the band's ends each by the same average (steps unchanged). */
export function smoothPoints<P extends BandPoint>(points: readonly P[], weight: number): P[] {
  if (smoothingWeight(weight) === 0) return [...points];
  const values = ema(
    points.map((point) => point.value),
    weight,
  );
  const lows = ema(
    points.map((point) => point.low ?? point.value),
    weight,
  );
  const highs = ema(
    points.map((point) => point.high ?? point.value),
    weight,
  );
  return points.map((point, i) => ({
    ...point,
    value: values[i]!,
    ...(point.low === undefined ? {} : { low: lows[i]! }),
    ...(point.high === undefined ? {} : { high: highs[i]! }),
  }));
}

/** The steps every chart of a set spans (small multiples share their x axis): the first and last of all. */
export function sharedStepRange(series: ReadonlyArray<readonly { readonly step: number }[]>): Domain | undefined {
  let first = Infinity;
  let last = -Infinity;
  for (const points of series)
    for (const point of points) {
      first = Math.min(first, point.step);
      last = Math.max(last, point.step);
    }
  return first <= last ? [first, last] : undefined;
}
