/**
 * The rollout tab's waterfall timeline, pure: spans laid out as rows (depth-first by parent,
 * children by start time), each bar at its start and duration relative to the rollout's first
 * span, and the viewport maths the canvas renderer uses — which rows are in view, a bar's pixels,
 * zoom around the pointer, pan, the time axis' ticks and what is under the pointer. No DOM: unit
 * tested and benchmarked in Node (2,000 spans).
 */
import type { Span, SpanCategory } from '../../trainer-daemon/protocol/records';

export interface TimelineRow {
  readonly span: Span;
  readonly depth: number;
  /** Milliseconds from the timeline's origin (the earliest span start). */
  readonly start: number;
  /** End in the same clock; a running span (no end yet) reaches the latest time seen. */
  readonly end: number;
  readonly running: boolean;
  readonly error: boolean;
  readonly category: SpanCategory;
}

export interface TimelineLayout {
  readonly rows: readonly TimelineRow[];
  /** Epoch ms of the timeline's origin. */
  readonly originMs: number;
  /** Total time covered (ms, ≥ 1). */
  readonly durationMs: number;
  /** Row index of each span id. */
  readonly indexOf: ReadonlyMap<string, number>;
}

/** Deepest nesting drawn; deeper spans (and cycles in bad data) stay at this depth. */
export const MAX_DEPTH = 32;

/** Spans as timeline rows: every root, then its children depth-first, siblings by start then sequence. */
export function layoutTimeline(spans: readonly Span[], nowMs: number = Date.now()): TimelineLayout {
  const byStart = [...spans].sort((a, b) => a.startMs - b.startMs || a.sequence - b.sequence);
  const ids = new Set(byStart.map((span) => span.spanId));
  const children = new Map<string, Span[]>();
  const roots: Span[] = [];
  for (const span of byStart) {
    const parent = span.parentSpanId;
    if (parent !== null && parent !== span.spanId && ids.has(parent)) {
      const list = children.get(parent);
      if (list) list.push(span);
      else children.set(parent, [span]);
    } else roots.push(span);
  }
  const originMs = byStart[0]?.startMs ?? 0;
  const latest = byStart.reduce((max, span) => Math.max(max, span.endMs ?? span.startMs), originMs);
  // Running spans reach "now" (at most a minute past the latest time seen, for a clock that is off).
  const runningEnd = byStart.some((span) => span.endMs === null)
    ? Math.max(latest, Math.min(nowMs, latest + 60_000))
    : latest;
  const rows: TimelineRow[] = [];
  const indexOf = new Map<string, number>();
  // Iterative depth-first walk: a 2,000-deep chain must not overflow the stack.
  const stack: Array<{ span: Span; depth: number }> = roots.reverse().map((span) => ({ span, depth: 0 }));
  while (stack.length > 0) {
    const { span, depth } = stack.pop()!;
    if (indexOf.has(span.spanId)) continue;
    indexOf.set(span.spanId, rows.length);
    const running = span.endMs === null;
    rows.push({
      span,
      depth,
      running,
      start: span.startMs - originMs,
      end: (running ? runningEnd : Math.max(span.endMs!, span.startMs)) - originMs,
      error: span.statusCode === 'error',
      category: span.category,
    });
    const kids = children.get(span.spanId);
    if (kids)
      for (let i = kids.length - 1; i >= 0; i -= 1)
        stack.push({ span: kids[i]!, depth: Math.min(depth + 1, MAX_DEPTH) });
  }
  // Spans only reachable through a cycle of parents (bad data) are still shown, as roots.
  for (const span of byStart) {
    if (indexOf.has(span.spanId)) continue;
    indexOf.set(span.spanId, rows.length);
    rows.push({
      span,
      depth: 0,
      running: span.endMs === null,
      start: span.startMs - originMs,
      end: (span.endMs ?? runningEnd) - originMs,
      error: span.statusCode === 'error',
      category: span.category,
    });
  }
  return { rows, originMs, durationMs: Math.max(1, runningEnd - originMs), indexOf };
}

/** The visible time window, in ms from the origin. */
export interface Viewport {
  readonly from: number;
  readonly to: number;
}

/** The shortest window zoom reaches (a tenth of a millisecond across the plot). */
export const MIN_WINDOW_MS = 0.1;

export function fullViewport(layout: TimelineLayout): Viewport {
  return { from: 0, to: layout.durationMs };
}

/** Keeps a window inside [0, duration] and at least MIN_WINDOW_MS wide, without changing its width when it can. */
export function clampViewport(view: Viewport, durationMs: number): Viewport {
  const width = Math.min(durationMs, Math.max(MIN_WINDOW_MS, view.to - view.from));
  const from = Math.min(Math.max(0, view.from), durationMs - width);
  return { from, to: from + width };
}

/** Zooms by `factor` (< 1 zooms in) keeping the time under `anchor` (0–1 across the plot) in place. */
export function zoomViewport(view: Viewport, factor: number, anchor: number, durationMs: number): Viewport {
  const width = view.to - view.from;
  const at = view.from + width * anchor;
  const next = Math.min(durationMs, Math.max(MIN_WINDOW_MS, width * factor));
  return clampViewport({ from: at - next * anchor, to: at - next * anchor + next }, durationMs);
}

/** Pans by a fraction of the window's width (positive: later). */
export function panViewport(view: Viewport, fraction: number, durationMs: number): Viewport {
  const shift = (view.to - view.from) * fraction;
  return clampViewport({ from: view.from + shift, to: view.to + shift }, durationMs);
}

/** The rows a scroll position shows (with `overscan` extra on each side). */
export function visibleRows(
  scrollTop: number,
  height: number,
  rowHeight: number,
  count: number,
  overscan = 4,
): { first: number; last: number } {
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(count - 1, Math.ceil((scrollTop + height) / rowHeight) + overscan);
  return { first, last };
}

/** A bar's x and width in plot pixels; at least 2 px wide so an instant span is still seen; null when out of view. */
export function barPixels(
  row: Pick<TimelineRow, 'start' | 'end'>,
  view: Viewport,
  plotWidth: number,
): { x: number; width: number } | null {
  if (row.end < view.from || row.start > view.to) return null;
  const scale = plotWidth / (view.to - view.from);
  const x = Math.max(0, (row.start - view.from) * scale);
  const right = Math.min(plotWidth, (row.end - view.from) * scale);
  return { x, width: Math.max(2, right - x) };
}

/** The row under a point of the canvas (plot coordinates), or -1. */
export function rowAt(y: number, scrollTop: number, rowHeight: number, count: number): number {
  const index = Math.floor((y + scrollTop) / rowHeight);
  return index >= 0 && index < count ? index : -1;
}

/** Round time ticks (1, 2, 5 × 10^n ms) across the window, about one per `minSpacing` px. */
export function timeTicks(view: Viewport, plotWidth: number, minSpacing = 90): number[] {
  const width = view.to - view.from;
  const rough = (width * minSpacing) / Math.max(1, plotWidth);
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((candidate) => candidate >= rough) ?? 10 * power;
  const ticks: number[] = [];
  // Multiples of the step (not a running sum, which drifts: 3.1 + 0.1 + … misses 3.5).
  for (let k = Math.ceil(view.from / step - 1e-9); k * step <= view.to + step * 1e-9 && ticks.length < 200; k += 1)
    ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/** The index of the next (direction 1) or previous (-1) row that is an LLM call, from `from`; `from` itself when there is none. */
export function nextStep(layout: TimelineLayout, from: number, direction: 1 | -1): number {
  for (let i = from + direction; i >= 0 && i < layout.rows.length; i += direction)
    if (layout.rows[i]!.category === 'llm') return i;
  return from;
}
