/**
 * The rollout tab's waterfall timeline, pure: the rollout as the root row, its spans laid out as rows
 * (depth-first by parent, children by start time), each bar at its start and duration relative to the
 * rollout's start, and the viewport maths the canvas renderer uses — which rows are in view, a bar's pixels,
 * zoom around the pointer, pan, the time axis' ticks and what is under the pointer. No DOM: unit
 * tested and benchmarked in Node (2,000 spans).
 */
import type { Json, Rollout, Span, SpanCategory } from '../../trainer-daemon/protocol/records';

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

/** The root row's span id: all zeros, which OpenTelemetry never gives a span (an invalid id). */
export const ROOT_SPAN_ID = '0000000000000000';

export function isRootSpan(span: Pick<Span, 'spanId'>): boolean {
  return span.spanId === ROOT_SPAN_ID;
}

/**
 * The whole rollout as a span, the timeline's root row (trace views start with the trace): from the rollout's
 * start to its end (still open while it runs), not the first span's; failed when the rollout failed.
 */
export function rolloutRootSpan(rollout: Rollout, name: string): Span {
  const failed = rollout.status === 'failed' || rollout.status === 'timeout';
  const attributes: Record<string, Json> = {
    'rollout.id': rollout.id,
    'rollout.status': rollout.status,
    'rollout.mode': rollout.mode,
    'rollout.attempts': rollout.attemptCount,
  };
  if (rollout.task) attributes['rollout.task'] = rollout.task.input;
  if (rollout.exitCode !== null) attributes['rollout.exitCode'] = rollout.exitCode;
  if (rollout.error) attributes['rollout.error'] = rollout.error;
  const finished = rollout.status !== 'running' && rollout.status !== 'queued';
  return {
    traceId: '0'.repeat(32),
    spanId: ROOT_SPAN_ID,
    parentSpanId: null,
    name,
    kind: 'internal',
    category: 'agent',
    startMs: rollout.startedAt ?? rollout.createdAt,
    endMs: finished ? (rollout.endedAt ?? rollout.updatedAt) : null,
    statusCode: failed ? 'error' : finished ? 'ok' : 'unset',
    statusMessage: failed ? (rollout.error ?? rollout.status) : null,
    attributes,
    events: [],
    promptTokens: rollout.promptTokens,
    completionTokens: rollout.completionTokens,
    rolloutId: rollout.id,
    attempt: Math.max(0, rollout.attemptCount - 1),
    sequence: 0,
  };
}

/**
 * More than this outside the rollout's own times, the spans' clock is not the daemon's (an agent on another machine).
 */
const CLOCK_SKEW_MS = 60_000;

/**
 * The rollout's row as the timeline shows it: its own start and end, unless its spans were timed by a clock that
 * disagrees with the daemon's by more than a minute; then the spans' extent, so the axis is not stretched over years.
 */
function withinClock(root: Span, spans: readonly Span[]): Span {
  if (spans.length === 0) return root;
  const first = spans.reduce((min, span) => Math.min(min, span.startMs), Number.POSITIVE_INFINITY);
  const last = spans.reduce((max, span) => Math.max(max, span.endMs ?? span.startMs), Number.NEGATIVE_INFINITY);
  const rootEnd = root.endMs ?? Math.max(last, root.startMs);
  if (first >= root.startMs - CLOCK_SKEW_MS && last <= rootEnd + CLOCK_SKEW_MS) return root;
  return { ...root, startMs: first, endMs: root.endMs === null ? null : last };
}

/**
 * Spans as timeline rows: every root, then its children depth-first, siblings by start then sequence. With a
 * `root` (the rollout as a span, rolloutRootSpan), it is the first row and the spans' roots are its children;
 * the timeline's origin and length then cover the whole rollout.
 */
export function layoutTimeline(spans: readonly Span[], nowMs: number = Date.now(), given?: Span): TimelineLayout {
  const root = given && withinClock(given, spans);
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
  const all = root ? [root, ...byStart] : byStart;
  const originMs = all.reduce((min, span) => Math.min(min, span.startMs), all[0]?.startMs ?? 0);
  const latest = all.reduce((max, span) => Math.max(max, span.endMs ?? span.startMs), originMs);
  // Running spans reach "now" (at most a minute past the latest time seen, for a clock that is off).
  const runningEnd = all.some((span) => span.endMs === null)
    ? Math.max(latest, Math.min(nowMs, latest + 60_000))
    : latest;
  const rows: TimelineRow[] = [];
  const indexOf = new Map<string, number>();
  const rowOf = (span: Span, depth: number): TimelineRow => {
    const running = span.endMs === null;
    return {
      span,
      depth,
      running,
      start: span.startMs - originMs,
      end: (running ? runningEnd : Math.max(span.endMs!, span.startMs)) - originMs,
      error: span.statusCode === 'error',
      category: span.category,
    };
  };
  if (root) {
    indexOf.set(root.spanId, 0);
    rows.push(rowOf(root, 0));
  }
  const top = root ? 1 : 0;
  // Iterative depth-first walk: a 2,000-deep chain must not overflow the stack.
  const stack: Array<{ span: Span; depth: number }> = roots.reverse().map((span) => ({ span, depth: top }));
  while (stack.length > 0) {
    const { span, depth } = stack.pop()!;
    if (indexOf.has(span.spanId)) continue;
    indexOf.set(span.spanId, rows.length);
    rows.push(rowOf(span, depth));
    const kids = children.get(span.spanId);
    if (kids)
      for (let i = kids.length - 1; i >= 0; i -= 1)
        stack.push({ span: kids[i]!, depth: Math.min(depth + 1, MAX_DEPTH) });
  }
  // Spans only reachable through a cycle of parents (bad data) are still shown, as roots.
  for (const span of byStart) {
    if (indexOf.has(span.spanId)) continue;
    indexOf.set(span.spanId, rows.length);
    rows.push(rowOf(span, top));
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

/**
 * The index of the next (direction 1) or previous (-1) row that is an LLM call, from `from`; `from` itself when there
 * is none.
 */
export function nextStep(layout: TimelineLayout, from: number, direction: 1 | -1): number {
  for (let i = from + direction; i >= 0 && i < layout.rows.length; i += direction)
    if (layout.rows[i]!.category === 'llm') return i;
  return from;
}

/** The name column's width: about a third of the timeline, 140–320 px (a narrow tab keeps room for bars). */
export function nameColumnWidth(totalWidth: number): number {
  return Math.round(Math.min(320, Math.max(140, totalWidth * 0.34)));
}

/**
 * The waterfall's height: its rows and axis (3 spans get 3 rows, not a fixed box), at most `maxHeight` (the
 * conversation below keeps the rest), at least `minHeight`; a height the user dragged it to wins, within the same
 * bounds.
 */
export function timelineHeight(
  rowCount: number,
  options: { rowHeight: number; chrome: number; maxHeight: number; minHeight: number; userHeight?: number },
): number {
  const fitted = options.userHeight ?? options.chrome + Math.max(1, rowCount) * options.rowHeight;
  const cap = Math.max(
    options.minHeight,
    options.userHeight === undefined ? options.maxHeight : Math.max(options.maxHeight, options.userHeight),
  );
  return Math.round(Math.min(cap, Math.max(options.minHeight, fitted)));
}

/**
 * Where a bar's text (its duration, its reward) goes, so none runs past the plot: after the bar when it fits,
 * else inside the bar's end when the bar is wide enough, else before the bar's start. `x` is the text's anchor.
 */
export function barTextPlacement(
  bar: { x: number; width: number },
  textWidth: number,
  plotWidth: number,
  gap = 4,
): { x: number; align: 'left' | 'right'; inside: boolean } {
  if (bar.x + bar.width + gap + textWidth <= plotWidth)
    return { x: bar.x + bar.width + gap, align: 'left', inside: false };
  if (bar.width >= textWidth + 2 * gap)
    return { x: Math.min(plotWidth, bar.x + bar.width) - gap, align: 'right', inside: true };
  return { x: Math.max(textWidth, bar.x - gap), align: 'right', inside: false };
}

/** A time tick's label: beside its tick, or ending at the plot's right edge when it would run past it. */
export function tickLabelPlacement(
  tickX: number,
  textWidth: number,
  right: number,
  gap = 2,
): { x: number; align: 'left' | 'right' } {
  return tickX + gap + textWidth <= right
    ? { x: tickX + gap, align: 'left' }
    : { x: Math.min(right, tickX) - gap, align: 'right' };
}
