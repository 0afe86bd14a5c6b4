/**
 * The panel at scale, in a real VS Code (code-server) in a real browser: a workspace whose store
 * holds 100,000 rollouts. The list keeps only the rows in view in the document while the user
 * scrolls deep into it (pages arrive through the daemon's cursor), and frames keep coming while it
 * scrolls. Frame times are printed, not asserted (machines are noisy); what is asserted is what must
 * hold on any machine: the list is virtualized, it pages, and the newest rollout comes first.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Frame, FrameLocator, Page } from 'playwright-core';
import { frameWith } from '../helpers/codeServer';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { seedRollouts } from '../helpers/largeStore';

const ROLLOUTS = 100_000;
/** How far the measurement scrolls: 50 pages of the panel's cursor. */
const TARGET_ROWS = 10_000;

/** Frame intervals (ms) recorded by `recordFrames` in the webview. */
interface FrameLog {
  intervals: number[];
  stop: boolean;
  last: number | undefined;
  tick?: (time: number) => void;
}

/** The webview's globals that the functions below touch (this file is compiled without the DOM library). */
interface WebviewGlobals {
  lightningFrames: FrameLog;
  performance: { now(): number };
  requestAnimationFrame(callback: (time: number) => void): void;
  document: {
    querySelector(
      selector: string,
    ): { scrollTop: number; scrollHeight: number; clientHeight: number; textContent: string | null } | null;
    querySelectorAll(selector: string): { length: number };
  };
}

/** Runs in the webview: logs the interval between consecutive animation frames until `stop` is set. */
function recordFrames(): void {
  const page = globalThis as unknown as WebviewGlobals;
  const log: FrameLog = { intervals: [], stop: false, last: undefined };
  page.lightningFrames = log;
  // A property, not a named local: the test's compiler would wrap a named function in a helper the page lacks.
  log.tick = (time: number): void => {
    if (log.last !== undefined) log.intervals.push(time - log.last);
    log.last = time;
    if (!log.stop) page.requestAnimationFrame(log.tick!);
  };
  page.requestAnimationFrame(log.tick);
}

function stopFrames(): number[] {
  const page = globalThis as unknown as WebviewGlobals;
  page.lightningFrames.stop = true;
  return page.lightningFrames.intervals;
}

/** Runs in the webview: the list's scroll position in rows, and the rows in the document. */
function listState(rowHeight: number): { topRow: number; loadedRows: number; rowsInDocument: number } {
  const page = globalThis as unknown as WebviewGlobals;
  const list = page.document.querySelector('.rollout-list')!;
  return {
    topRow: Math.floor(list.scrollTop / rowHeight),
    loadedRows: Math.floor(page.document.querySelector('.rollout-list .spacer')!.scrollHeight / rowHeight),
    rowsInDocument: page.document.querySelectorAll('.rollout-row').length,
  };
}

const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};

describe('the panel with 100,000 rollouts (code-server + chromium)', { concurrency: false, timeout: 600_000 }, () => {
  let session: E2eSession;
  let page: Page;
  let panel: FrameLocator;

  before(async () => {
    session = await startE2eSession({}, async (_workspace, storeFile) => {
      fs.mkdirSync(path.dirname(storeFile), { recursive: true });
      seedRollouts(storeFile, ROLLOUTS);
    });
    ({ page, panel } = session);
  });

  after(() => session?.close('extension-scale'));

  it(`scrolls ${TARGET_ROWS.toLocaleString('en-US')} rows deep with only the rows in view in the document (frame times printed)`, async () => {
    await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
    const newest = `ro-${(ROLLOUTS - 1).toString(16).padStart(16, '0')}`;
    await panel.locator(`.rollout-row[data-rollout-id="${newest}"]`).waitFor({ timeout: 60_000 });
    const frame: Frame = await frameWith(page, '.rollout-list', 15_000);
    // The list's row height (webview/rolloutList.ts), read off a rendered row.
    const rowHeight = await frame.evaluate(
      () =>
        (
          globalThis as unknown as { document: { querySelector(s: string): { offsetHeight: number } | null } }
        ).document.querySelector('.rollout-row')!.offsetHeight,
    );
    assert.ok(rowHeight > 0);

    // The baseline: frame intervals of the same page while nothing happens.
    await frame.evaluate(recordFrames);
    await page.waitForTimeout(1_000);
    const idle = await frame.evaluate(stopFrames);

    const box = (await panel.locator('.rollout-list').boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await frame.evaluate(recordFrames);
    const started = performance.now();
    let state = await frame.evaluate(listState, rowHeight);
    let maxInDocument = state.rowsInDocument;
    while (state.topRow < TARGET_ROWS && performance.now() - started < 120_000) {
      await page.mouse.wheel(0, 4_000);
      await page.waitForTimeout(16);
      state = await frame.evaluate(listState, rowHeight);
      maxInDocument = Math.max(maxInDocument, state.rowsInDocument);
    }
    const seconds = (performance.now() - started) / 1000;
    const scrolling = await frame.evaluate(stopFrames);
    await session.shot('20-scrolled-deep');

    console.log(
      `# measured: scrolled to row ${state.topRow.toLocaleString('en-US')} of ${ROLLOUTS.toLocaleString('en-US')} in ${seconds.toFixed(1)} s (${state.loadedRows.toLocaleString('en-US')} rows paged in); at most ${maxInDocument} rows in the document`,
    );
    console.log(
      `# measured: frame interval while scrolling p50 ${percentile(scrolling, 50).toFixed(1)} / p95 ${percentile(scrolling, 95).toFixed(1)} / max ${Math.max(...scrolling).toFixed(1)} ms (${scrolling.length} frames); idle baseline p50 ${percentile(idle, 50).toFixed(1)} / p95 ${percentile(idle, 95).toFixed(1)} ms; p95 ratio ${(percentile(scrolling, 95) / percentile(idle, 95)).toFixed(2)}×`,
    );

    assert.ok(state.topRow >= TARGET_ROWS, `the list scrolled to row ${state.topRow}, not ${TARGET_ROWS}`);
    // Virtualized: the rows in view plus the overscan, never the thousands paged in.
    assert.ok(maxInDocument < 100, `${maxInDocument} rows were in the document at once`);
    assert.ok(state.loadedRows > TARGET_ROWS && state.loadedRows < ROLLOUTS, `${state.loadedRows} rows were paged in`);
    const shown = await frame.evaluate(
      () => (globalThis as unknown as WebviewGlobals).document.querySelector('.count')?.textContent ?? '',
    );
    // The daemon's count of every rollout, whatever has been paged in.
    assert.equal(shown, `${ROLLOUTS.toLocaleString('en-US')} rollouts`);
  });
});
