/**
 * What the panel's small multiples and the run tab's charts share in the DOM: the value under the pointer
 * (a cursor line at the nearest iteration and a read-out line), and TensorBoard's smoothing slider (0–0.99).
 * The charts themselves are pure markup from the one chart module (protocol/ui/chart.ts).
 */
import { stepAt } from '../trainer-daemon/protocol/ui/chart';
import { MAX_SMOOTHING, smoothingWeight } from '../trainer-daemon/protocol/ui/chartScale';
import { formatValue, type ChartUnit } from '../trainer-daemon/protocol/ui/grpoCharts';
import { el } from './dom';

/**
 * Hovering the chart in `box` moves its cursor line to the nearest of `steps` and writes `describe(step)` in
 * `readout`; leaving it writes `idle` back.
 */
export function attachChartHover(
  box: HTMLElement,
  readout: HTMLElement,
  steps: readonly number[],
  describe: (step: number) => string,
  idle: string,
): void {
  const svg = box.querySelector('svg');
  const cursor = svg?.querySelector<SVGLineElement>('.hover-line');
  if (!svg || !cursor) return;
  const data = svg.dataset;
  const scale = {
    first: Number(data.first),
    last: Number(data.last),
    left: Number(data.left),
    plotWidth: Number(data.plotWidth),
  };
  const width = Number(data.width);
  readout.textContent = idle;
  svg.addEventListener('mousemove', (event) => {
    const rect = svg.getBoundingClientRect();
    const step = stepAt(((event.clientX - rect.left) / Math.max(1, rect.width)) * width, scale, steps);
    if (step === undefined) return;
    const x =
      scale.left +
      (scale.last === scale.first ? 0.5 : (step - scale.first) / (scale.last - scale.first)) * scale.plotWidth;
    cursor.setAttribute('x1', String(x));
    cursor.setAttribute('x2', String(x));
    cursor.setAttribute('visibility', 'visible');
    readout.textContent = describe(step);
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    readout.textContent = idle;
  });
}

/**
 * "Smoothing [slider] 0.60": changes are reported as the slider moves (the charts redraw), the value kept by the
 * caller.
 */
export function smoothingControl(value: number, onChange: (weight: number) => void): HTMLElement {
  const box = el('label', 'smoothing-control');
  box.title =
    'Smoothing: an exponential moving average of each curve, as TensorBoard draws it (0: the raw values). The raw curve stays, faded.';
  const slider = document.createElement('input');
  slider.type = 'range';
  slider.min = '0';
  slider.max = String(MAX_SMOOTHING);
  slider.step = '0.01';
  slider.value = String(smoothingWeight(value));
  slider.className = 'smoothing-slider';
  slider.setAttribute('aria-label', 'Smoothing weight, 0 to 0.99');
  const shown = el('span', 'smoothing-value', smoothingWeight(value).toFixed(2));
  slider.addEventListener('input', () => {
    const weight = smoothingWeight(slider.value);
    shown.textContent = weight.toFixed(2);
    onChange(weight);
  });
  box.append(el('span', undefined, 'Smoothing'), slider, shown);
  return box;
}

/** A point's value (± its band's half-width) for a read-out; '—' where the chart has none. */
export function pointText(point: { value: number; low?: number; high?: number } | undefined, unit: ChartUnit): string {
  if (!point) return '—';
  const band =
    point.low !== undefined && point.high !== undefined ? ` ± ${formatValue((point.high - point.low) / 2, unit)}` : '';
  return `${formatValue(point.value, unit)}${band}`;
}
