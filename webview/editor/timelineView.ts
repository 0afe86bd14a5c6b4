/**
 * The waterfall timeline, drawn on a canvas: only the rows in view are painted (a 2,000-span
 * rollout scrolls and zooms like a 20-span one), the rollout as the root row, each row named by what it
 * did (spanLabel.ts) in a name column (indented by depth, cut with …) beside bars at their start and
 * duration, errors in the theme's error colour with a mark, a time axis with round ticks; no text runs
 * past the right edge (a bar's duration moves inside or before it, the last tick's label ends at the edge).
 * Sized to its rows up to a share of the tab, with a drag handle under it. Hover shows the span's latency
 * and tokens; click selects; Ctrl/⌘+wheel or +/- zoom around the pointer, drag / Shift+wheel / ←/→ pan,
 * 0-width fit with `f`. Layout maths: timelineLayout.ts.
 */
import type { SpanCategory } from '../../trainer-daemon/protocol/records';
import { el } from '../dom';
import { formatDuration } from '../../trainer-daemon/protocol/format';
import {
  barPixels,
  barTextPlacement,
  fullViewport,
  isRootSpan,
  nameColumnWidth,
  panViewport,
  rowAt,
  tickLabelPlacement,
  timelineHeight,
  timeTicks,
  visibleRows,
  zoomViewport,
  type TimelineLayout,
  type TimelineRow,
  type Viewport,
} from './timelineLayout';
import { spanLabel } from './spanLabel';

export const ROW_HEIGHT = 22;
const AXIS_HEIGHT = 20;
/** The drag handle under the waterfall, and the borders around it. */
const HANDLE_HEIGHT = 6;
const CHROME = AXIS_HEIGHT + HANDLE_HEIGHT + 3;
/** Room right of the plot, so the last tick and bar text stay inside. */
const RIGHT_MARGIN = 12;
const INDENT = 12;
/** The tallest the waterfall grows by itself, as a share of the tab's height: the conversation keeps the rest. */
const MAX_SHARE = 0.45;

const CATEGORY_COLOUR: Record<SpanCategory, string> = {
  llm: '--vscode-charts-blue',
  tool: '--vscode-charts-orange',
  agent: '--vscode-charts-purple',
  reward: '--vscode-charts-green',
  other: '--vscode-descriptionForeground',
};

export interface TimelineEvents {
  select(index: number): void;
  /** The first frame with rows (or with a complete, empty rollout) is drawn. */
  painted(): void;
  /** The user dragged the waterfall's height (px), or reset it to fit its rows (undefined). */
  resized(height: number | undefined): void;
}

export class TimelineView {
  readonly element = el('div', 'timeline');
  private readonly axis = document.createElement('canvas');
  private readonly scroller = el('div', 'timeline-scroller');
  private readonly spacer = el('div', 'timeline-spacer');
  private readonly canvas = document.createElement('canvas');
  private readonly tooltip = el('div', 'timeline-tooltip');
  private readonly handle = el('div', 'timeline-resizer');
  /** The height the user dragged the waterfall to; undefined: sized to its rows. */
  private userHeight: number | undefined;
  private layout: TimelineLayout = { rows: [], originMs: 0, durationMs: 1, indexOf: new Map() };
  private view: Viewport = { from: 0, to: 1 };
  private fitted = true;
  private selected = -1;
  private hovered = -1;
  private frame = 0;
  private colours = new Map<string, string>();
  private drag: { x: number; view: Viewport } | undefined;
  /** Draw times (ms) of the last frames, for the e2e's frame-time read-out. */
  readonly drawTimes: number[] = [];
  /** Step rewards by span id, drawn at the end of their rows. */
  private stepRewards = new Map<string, number>();
  private complete = false;

  constructor(
    private readonly events: TimelineEvents,
    userHeight?: number,
  ) {
    this.userHeight = userHeight;
    this.scroller.tabIndex = 0;
    this.scroller.setAttribute('role', 'group');
    this.scroller.setAttribute('aria-roledescription', 'timeline');
    this.scroller.setAttribute(
      'aria-label',
      'Timeline of the rollout’s spans. j / k: next or previous LLM call; ↑ / ↓: any span; + / −: zoom; ← / →: pan; f: fit; 1, 0 or a number: rate the selected step; Shift+number: rate the rollout; c: comment.',
    );
    this.axis.className = 'timeline-axis';
    this.canvas.className = 'timeline-canvas';
    this.tooltip.hidden = true;
    this.tooltip.setAttribute('role', 'tooltip');
    this.scroller.append(this.spacer, this.canvas);
    this.element.append(this.axis, this.scroller, this.handle, this.tooltip);
    this.setUpResizer();
    window.addEventListener('resize', () => this.fitHeight());
    this.scroller.addEventListener('scroll', () => this.schedule());
    new ResizeObserver(() => this.schedule()).observe(this.scroller);
    this.scroller.addEventListener('wheel', (event) => this.onWheel(event), { passive: false });
    this.scroller.addEventListener('mousemove', (event) => this.onMove(event));
    this.scroller.addEventListener('mouseleave', () => this.hover(-1));
    this.scroller.addEventListener('mousedown', (event) => this.onDown(event));
    window.addEventListener('mouseup', () => (this.drag = undefined));
    // Theme changes swap the body's classes: colours are read again.
    new MutationObserver(() => {
      this.colours.clear();
      this.schedule();
    }).observe(document.body, { attributes: true, attributeFilter: ['class'] });
  }

  /** `complete`: every stored span is in the layout (the first frame drawn with them is marked for the e2e). */
  setLayout(layout: TimelineLayout, complete = false): void {
    this.layout = layout;
    this.complete = complete;
    this.view = this.fitted
      ? fullViewport(layout)
      : { from: this.view.from, to: Math.min(this.view.to, layout.durationMs) };
    this.spacer.style.height = `${layout.rows.length * ROW_HEIGHT}px`;
    this.fitHeight();
    // Called in a frame (the tab lays out once per frame): drawn in it, not one frame later.
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.draw();
  }

  setStepRewards(rewards: Map<string, number>): void {
    this.stepRewards = rewards;
    this.schedule();
  }

  get viewport(): Viewport {
    return this.view;
  }

  select(index: number): void {
    this.selected = index;
    const top = index * ROW_HEIGHT;
    if (top < this.scroller.scrollTop) this.scroller.scrollTop = top;
    else if (top + ROW_HEIGHT > this.scroller.scrollTop + this.scroller.clientHeight)
      this.scroller.scrollTop = top + ROW_HEIGHT - this.scroller.clientHeight;
    this.schedule();
  }

  focus(): void {
    this.scroller.focus();
  }

  zoom(factor: number, anchor = 0.5): void {
    this.view = zoomViewport(this.view, factor, anchor, this.layout.durationMs);
    this.fitted = this.view.from === 0 && this.view.to >= this.layout.durationMs;
    this.schedule();
  }

  pan(fraction: number): void {
    this.view = panViewport(this.view, fraction, this.layout.durationMs);
    this.schedule();
  }

  fit(): void {
    this.fitted = true;
    this.view = fullViewport(this.layout);
    this.schedule();
  }

  private get nameWidth(): number {
    return nameColumnWidth(this.scroller.clientWidth);
  }

  private plotWidth(): number {
    return Math.max(40, this.scroller.clientWidth - this.nameWidth - RIGHT_MARGIN);
  }

  /** The waterfall's height: its rows up to a share of the tab (or where the user dragged it). */
  private fitHeight(): void {
    const height = timelineHeight(this.layout.rows.length, {
      rowHeight: ROW_HEIGHT,
      chrome: CHROME,
      maxHeight: window.innerHeight * MAX_SHARE,
      minHeight: CHROME + 2 * ROW_HEIGHT,
      ...(this.userHeight === undefined ? {} : { userHeight: this.userHeight }),
    });
    if (this.element.style.height !== `${height}px`) this.element.style.height = `${height}px`;
    this.handle.setAttribute('aria-valuenow', String(height));
  }

  /** The handle under the waterfall: drag (or ↑ / ↓ on it) to resize, double-click (or Enter) to fit its rows again. */
  private setUpResizer(): void {
    const handle = this.handle;
    handle.tabIndex = 0;
    handle.setAttribute('role', 'separator');
    handle.setAttribute('aria-orientation', 'horizontal');
    handle.setAttribute('aria-label', 'Resize the timeline: drag, or ↑ / ↓; double-click or Enter fits it to its rows');
    handle.title = 'Drag to resize the timeline; double-click to fit it to its rows';
    const resize = (height: number | undefined): void => {
      this.userHeight =
        height === undefined
          ? undefined
          : Math.round(Math.max(CHROME + ROW_HEIGHT, Math.min(height, window.innerHeight - 80)));
      this.fitHeight();
      this.schedule();
    };
    handle.addEventListener('pointerdown', (event) => {
      event.preventDefault();
      handle.setPointerCapture(event.pointerId);
      const start = { y: event.clientY, height: this.element.getBoundingClientRect().height };
      const move = (moved: PointerEvent): void => resize(start.height + moved.clientY - start.y);
      const up = (): void => {
        handle.removeEventListener('pointermove', move);
        handle.removeEventListener('pointerup', up);
        handle.removeEventListener('pointercancel', up);
        this.events.resized(this.userHeight);
      };
      handle.addEventListener('pointermove', move);
      handle.addEventListener('pointerup', up);
      handle.addEventListener('pointercancel', up);
    });
    handle.addEventListener('dblclick', () => {
      resize(undefined);
      this.events.resized(undefined);
    });
    handle.addEventListener('keydown', (event) => {
      const current = this.element.getBoundingClientRect().height;
      if (event.key === 'ArrowUp' || event.key === 'ArrowDown')
        resize(current + (event.key === 'ArrowDown' ? ROW_HEIGHT : -ROW_HEIGHT));
      else if (event.key === 'Enter') resize(undefined);
      else return;
      event.preventDefault();
      event.stopPropagation();
      this.events.resized(this.userHeight);
    });
  }

  private onWheel(event: WheelEvent): void {
    const rect = this.scroller.getBoundingClientRect();
    const anchor = Math.min(1, Math.max(0, (event.clientX - rect.left - this.nameWidth) / this.plotWidth()));
    if (event.ctrlKey || event.metaKey) {
      event.preventDefault();
      this.zoom(Math.exp(event.deltaY * 0.002), anchor);
    } else if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
      event.preventDefault();
      this.pan(((event.shiftKey ? event.deltaY : 0) + event.deltaX) / this.plotWidth());
    }
  }

  private onDown(event: MouseEvent): void {
    const rect = this.scroller.getBoundingClientRect();
    const index = rowAt(event.clientY - rect.top, this.scroller.scrollTop, ROW_HEIGHT, this.layout.rows.length);
    if (index >= 0) this.events.select(index);
    if (event.clientX - rect.left > this.nameWidth) this.drag = { x: event.clientX, view: this.view };
  }

  private onMove(event: MouseEvent): void {
    const rect = this.scroller.getBoundingClientRect();
    if (this.drag) {
      const shift = (this.drag.x - event.clientX) / this.plotWidth();
      this.view = panViewport(this.drag.view, shift, this.layout.durationMs);
      this.schedule();
    }
    const index = rowAt(event.clientY - rect.top, this.scroller.scrollTop, ROW_HEIGHT, this.layout.rows.length);
    this.hover(index, event.clientX - rect.left, event.clientY - rect.top);
  }

  private hover(index: number, x = 0, y = 0): void {
    if (index !== this.hovered) {
      this.hovered = index;
      this.schedule();
    }
    const row = this.layout.rows[index];
    if (!row) return void (this.tooltip.hidden = true);
    this.tooltip.hidden = false;
    this.tooltip.textContent = describeRow(row);
    this.tooltip.style.left = `${Math.max(0, Math.min(x + 12, this.element.clientWidth - Math.min(420, this.tooltip.offsetWidth || 260)))}px`;
    this.tooltip.style.top = `${y + AXIS_HEIGHT + 14}px`;
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private colour(variable: string): string {
    let value = this.colours.get(variable);
    if (value === undefined) {
      value = getComputedStyle(document.body).getPropertyValue(variable).trim() || '#888';
      this.colours.set(variable, value);
    }
    return value;
  }

  private draw(): void {
    const started = performance.now();
    const ratio = window.devicePixelRatio || 1;
    const width = this.scroller.clientWidth;
    const height = this.scroller.clientHeight;
    for (const [canvas, h] of [
      [this.canvas, height],
      [this.axis, AXIS_HEIGHT],
    ] as const) {
      if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(h * ratio)) {
        canvas.width = Math.round(width * ratio);
        canvas.height = Math.round(h * ratio);
        canvas.style.width = `${width}px`;
        canvas.style.height = `${h}px`;
      }
    }
    const plotWidth = this.plotWidth();
    const nameWidth = this.nameWidth;
    const font = `${getComputedStyle(document.body).getPropertyValue('--vscode-editor-font-size').trim() || '12'}px ${getComputedStyle(document.body).getPropertyValue('--vscode-font-family').trim() || 'sans-serif'}`;
    const context = this.canvas.getContext('2d')!;
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    context.font = font;
    context.textBaseline = 'middle';
    const scrollTop = this.scroller.scrollTop;
    // The canvas stays over the scroller's visible part; the spacer gives the scroll height.
    this.canvas.style.transform = `translateY(${scrollTop}px)`;
    const { first, last } = visibleRows(scrollTop, height, ROW_HEIGHT, this.layout.rows.length, 0);
    const foreground = this.colour('--vscode-foreground');
    const error = this.colour('--vscode-errorForeground');
    const grid = this.colour('--vscode-panel-border');
    const ticks = timeTicks(this.view, plotWidth);
    const scale = plotWidth / (this.view.to - this.view.from);
    context.strokeStyle = grid;
    context.globalAlpha = 0.4;
    for (const tick of ticks) {
      const x = nameWidth + (tick - this.view.from) * scale + 0.5;
      context.beginPath();
      context.moveTo(x, 0);
      context.lineTo(x, height);
      context.stroke();
    }
    context.globalAlpha = 1;
    // Row texts' extents (the e2e checks none runs past the timeline): the widest right edge drawn.
    let textRight = 0;
    for (let index = first; index <= last; index += 1) {
      const row = this.layout.rows[index]!;
      const y = index * ROW_HEIGHT - scrollTop;
      if (index === this.selected || index === this.hovered) {
        context.fillStyle = this.colour(
          index === this.selected ? '--vscode-list-activeSelectionBackground' : '--vscode-list-hoverBackground',
        );
        context.fillRect(0, y, width, ROW_HEIGHT);
      }
      const rowForeground =
        index === this.selected
          ? this.colour('--vscode-list-activeSelectionForeground') || foreground
          : row.error
            ? error
            : foreground;
      context.fillStyle = rowForeground;
      const indent = 6 + Math.min(row.depth, 16) * INDENT;
      const root = isRootSpan(row.span);
      context.font = root ? `600 ${font}` : font;
      // A failed span is marked as VS Code marks errors (the `error` codicon's circled cross), drawn, not a glyph.
      const mark = row.error ? ERROR_MARK + 4 : 0;
      if (row.error) drawErrorMark(context, indent + ERROR_MARK / 2, y + ROW_HEIGHT / 2, error);
      context.fillStyle = rowForeground;
      const label = fitText(context, spanLabel(row.span), nameWidth - 8 - indent - mark);
      context.fillText(label, indent + mark, y + ROW_HEIGHT / 2);
      context.font = font;
      const bar = barPixels(row, this.view, plotWidth);
      if (bar) {
        context.fillStyle = row.error ? error : this.colour(CATEGORY_COLOUR[row.category]);
        context.globalAlpha = row.running ? 0.5 : root ? 0.55 : 0.9;
        context.fillRect(nameWidth + bar.x, y + 5, bar.width, ROW_HEIGHT - 10);
        context.globalAlpha = 1;
        const reward = this.stepRewards.get(row.span.spanId);
        const duration = formatDuration(row.end - row.start);
        const after = `${row.running ? 'running' : duration}${reward === undefined ? '' : ` · reward ${Number(reward.toFixed(3))}`}`;
        const textWidth = context.measureText(after).width;
        const place = barTextPlacement(bar, textWidth, plotWidth);
        context.fillStyle = place.inside ? this.colour('--vscode-editor-background') : rowForeground;
        context.textAlign = place.align;
        context.fillText(after, nameWidth + place.x, y + ROW_HEIGHT / 2);
        context.textAlign = 'left';
        textRight = Math.max(textRight, nameWidth + (place.align === 'left' ? place.x + textWidth : place.x));
      }
    }
    const axis = this.axis.getContext('2d')!;
    axis.setTransform(ratio, 0, 0, ratio, 0, 0);
    axis.clearRect(0, 0, width, AXIS_HEIGHT);
    axis.font = font;
    axis.fillStyle = this.colour('--vscode-descriptionForeground');
    axis.textBaseline = 'middle';
    const spans = this.layout.rows.filter((row, i) => i > 0 || !isRootSpan(row.span)).length;
    axis.fillText(fitText(axis, `${spans} span${spans === 1 ? '' : 's'}`, nameWidth - 8), 6, AXIS_HEIGHT / 2);
    const axisRight = nameWidth + plotWidth + RIGHT_MARGIN - 2;
    let tickRight = 0;
    let previousRight = nameWidth;
    for (const tick of ticks) {
      const text = formatDuration(tick);
      const textWidth = axis.measureText(text).width;
      const place = tickLabelPlacement(nameWidth + (tick - this.view.from) * scale, textWidth, axisRight);
      const left = place.align === 'left' ? place.x : place.x - textWidth;
      // A label that would overlap the one before it (the last one, moved in from the edge) is left out.
      if (left < previousRight + 4 && tick !== ticks[0]) continue;
      axis.textAlign = place.align;
      axis.fillText(text, place.x, AXIS_HEIGHT / 2);
      previousRight = left + textWidth;
      tickRight = Math.max(tickRight, previousRight);
    }
    axis.textAlign = 'left';
    this.element.dataset.textRight = String(Math.ceil(Math.max(textRight, tickRight)));
    this.element.dataset.plotRight = String(Math.floor(nameWidth + plotWidth + RIGHT_MARGIN));
    const drawMs = performance.now() - started;
    this.drawTimes.push(drawMs);
    if (this.drawTimes.length > 240) this.drawTimes.splice(0, this.drawTimes.length - 240);
    // Read by the e2e on the page's own clock: when the first rows and all of them were painted, each frame's cost.
    const marks = this.element.dataset;
    marks.drawn = String(spans);
    marks.lastDrawMs = drawMs.toFixed(3);
    // The root row alone (the rollout, before its spans came) is not the first paint the e2e waits for.
    if ((spans > 0 || this.complete) && !marks.firstPaintAt) {
      marks.firstPaintAt = String(Date.now());
      this.events.painted();
    }
    if (this.complete && !marks.completePaintAt) marks.completePaintAt = String(Date.now());
  }
}

/** A text cut with … to fit a width (the canvas' current font). */
function fitText(context: CanvasRenderingContext2D, text: string, maxWidth: number): string {
  if (context.measureText(text).width <= maxWidth) return text;
  let [low, high] = [0, text.length];
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (context.measureText(`${text.slice(0, middle)}…`).width <= maxWidth) low = middle;
    else high = middle - 1;
  }
  return `${text.slice(0, low)}…`;
}

/** A row as the tooltip and the screen reader say it: what it did, kind, latency, tokens, start, error. */
export function describeRow(row: TimelineRow): string {
  const span = row.span;
  const tokens =
    span.promptTokens !== null || span.completionTokens !== null
      ? ` · ${span.promptTokens ?? 0} → ${span.completionTokens ?? 0} tokens`
      : '';
  const latency = row.running ? 'running' : formatDuration(row.end - row.start);
  return `${isRootSpan(span) ? 'rollout' : span.category} ${spanLabel(span)} · ${latency}${tokens} · at +${formatDuration(row.start)}${row.error ? ` · error: ${span.statusMessage ?? 'error'}` : ''}`;
}

/** The error mark's size in CSS pixels. */
const ERROR_MARK = 11;

/**
 * A circled cross centred at (x, y): the `error` codicon's shape, in the canvas (no font to load, no glyph to miss).
 */
function drawErrorMark(context: CanvasRenderingContext2D, x: number, y: number, colour: string): void {
  const radius = ERROR_MARK / 2 - 0.5;
  const arm = radius * 0.45;
  context.save();
  context.strokeStyle = colour;
  context.lineWidth = 1.3;
  context.beginPath();
  context.arc(x, y, radius, 0, Math.PI * 2);
  context.moveTo(x - arm, y - arm);
  context.lineTo(x + arm, y + arm);
  context.moveTo(x + arm, y - arm);
  context.lineTo(x - arm, y + arm);
  context.stroke();
  context.restore();
}
