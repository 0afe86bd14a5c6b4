/**
 * What a user would see cut off in a webview (the side panel, an editor tab), for the e2e suite: each element
 * whose box runs past its container's, horizontally and, where the container does not scroll, vertically; and
 * the side bar's width, which decides how much room the panel has.
 */
import assert from 'node:assert/strict';
import type { Frame, Page } from 'playwright-core';

export interface ClipCheck {
  /** The closest ancestor (of each element) that must hold it; none: the frame's viewport. */
  readonly container: string;
  readonly elements: string;
  /**
   * Top and bottom count too: for a container of fixed height (a list row, a toolbar, a tab's header) or the
   * viewport. A container that scrolls (the list, the conversation) clips vertically by design: leave it out.
   */
  readonly vertical?: boolean;
}

interface Box {
  left: number;
  top: number;
  right: number;
  bottom: number;
  width: number;
  height: number;
}
export interface BoxGlobals {
  innerWidth: number;
  innerHeight: number;
  document: {
    documentElement: { scrollWidth: number };
    querySelectorAll(selector: string): ArrayLike<{
      getBoundingClientRect(): Box;
      closest(selector: string): { getBoundingClientRect(): Box } | null;
      textContent: string | null;
    }>;
  };
}

/**
 * What is clipped in a frame: a page wider than its window (it scrolls sideways), and each element matching a
 * check whose box runs past its container (or the viewport; across, never past the viewport's right edge) by
 * more than a pixel, as `selector "text" [left, right] outside container [left, right]` (or `[top, bottom]` when
 * it runs past vertically); an empty list when nothing is.
 */
export async function clippedIn(frame: Frame, checks: readonly ClipCheck[]): Promise<string[]> {
  return frame.evaluate((list) => {
    const g = globalThis as unknown as BoxGlobals;
    const problems: string[] = [];
    // A page wider than its window scrolls sideways: its left edge goes out of sight (a table that will not wrap).
    const page = g.document.documentElement;
    if (page.scrollWidth > g.innerWidth + 1)
      problems.push(`the page is ${page.scrollWidth - g.innerWidth} px wider than its window: it scrolls sideways`);
    for (const { container, elements, vertical } of list) {
      for (const element of Array.from(g.document.querySelectorAll(elements))) {
        const box = element.getBoundingClientRect();
        if (box.width === 0 && box.height === 0) continue;
        const outer = element.closest(container)?.getBoundingClientRect() ?? {
          left: 0,
          top: 0,
          right: g.innerWidth,
          bottom: g.innerHeight,
          width: g.innerWidth,
          height: g.innerHeight,
        };
        const right = Math.min(outer.right, g.innerWidth);
        const text = (element.textContent ?? '').trim().slice(0, 30);
        if (box.left < outer.left - 1 || box.right > right + 1)
          problems.push(
            `${elements} "${text}" [${Math.round(box.left)}, ${Math.round(box.right)}] outside ${container} [${Math.round(outer.left)}, ${Math.round(right)}]`,
          );
        // Down, the container's own box (a page that scrolls puts what is below the fold there, unclipped).
        const bottom = outer.bottom;
        if (vertical && (box.top < outer.top - 1 || box.bottom > bottom + 1))
          problems.push(
            `${elements} "${text}" [top ${Math.round(box.top)}, bottom ${Math.round(box.bottom)}] outside ${container} [${Math.round(outer.top)}, ${Math.round(bottom)}]`,
          );
      }
    }
    return problems;
  }, checks);
}

/** Chart labels (svg text) inside their chart, the chart and its read-out inside their card. */
export const CHART_CHECKS: readonly ClipCheck[] = [
  { container: 'svg', elements: 'svg text', vertical: true },
  { container: '.chart-card', elements: '.chart-card svg', vertical: true },
  { container: '.chart-card', elements: '.chart-readout' },
];

/**
 * The side panel's list: each row's lines and texts inside the row (40 px high: a second line that wraps is cut),
 * the rows inside the list's width, the training runs' rows; the toolbar's count and buttons, the filters and the
 * status line inside the view.
 */
export const PANEL_LIST_CHECKS: readonly ClipCheck[] = [
  { container: '.rollout-row', elements: '.rollout-row .line1, .rollout-row .line2', vertical: true },
  { container: '.rollout-row', elements: '.rollout-row .status, .rollout-row .reward, .rollout-row .time' },
  { container: '.group-row', elements: '.group-row .line1, .group-row .line2', vertical: true },
  { container: '.group-row', elements: '.group-row .chevron, .group-row .time' },
  { container: '.rollout-list', elements: '.rollout-row, .group-row' },
  { container: '.run-row', elements: '.run-row > *', vertical: true },
  { container: '.toolbar', elements: '.toolbar > *', vertical: true },
  { container: '.filters', elements: '.filters > *', vertical: true },
  { container: '#app', elements: '.status-line, .toolbar, .filters', vertical: true },
];

/** VS Code's default side bar width: `min(300, window width / 4)` (its workbench layout). */
export const DEFAULT_SIDEBAR_WIDTH = 300;

/** The side bar's width in the window, asserted to be VS Code's default for a window this wide. */
export async function assertDefaultSidebarWidth(page: Page): Promise<number> {
  const box = await page.locator('.part.sidebar').first().boundingBox();
  const viewport = page.viewportSize();
  assert.ok(box && viewport, 'the side bar is shown');
  const expected = Math.min(DEFAULT_SIDEBAR_WIDTH, viewport.width / 4);
  assert.ok(Math.abs(box.width - expected) <= 1, `the side bar is ${box.width} px wide, VS Code's default ${expected}`);
  return box.width;
}
