/**
 * Timing a webview tab from a test: where its start-up went, from the click to its first paint (VS Code's frames, our
 * page, script, data and paint), read from the page's performance entries and the marks our page sets.
 */
import type { Frame } from 'playwright-core';

/** The page globals the evaluated functions touch (this file is compiled without the DOM library). */
export interface PageGlobals {
  document: { querySelector(selector: string): (PageElement & { dataset: Record<string, string | undefined> }) | null };
  requestAnimationFrame(callback: () => void): void;
  Date: DateConstructor;
}
export interface PageElement {
  click(): void;
  dispatchEvent(event: unknown): boolean;
}

interface PerformanceGlobals {
  performance: {
    timeOrigin: number;
    getEntriesByType(type: string): Array<{
      name: string;
      startTime: number;
      responseEnd: number;
      domInteractive?: number;
      decodedBodySize?: number;
    }>;
  };
}

/**
 * Where a new tab's time went after the click, on one clock (epoch ms: the pages' `performance.timeOrigin` and the
 * extension's `Date.now()`, one machine): the extension's marks (#app's data-opened-at, -panel-at, -html-at), VS Code's
 * two frames (the webview host and its content frame, by their navigation starts), our page's HTML, any scripts and
 * styles it loads (resource timing), its script's start, the first spans, the first paint.
 */
export async function startUp(tab: Frame, clickedAt: number, paintedAt: number): Promise<string> {
  const host = tab.parentFrame();
  const hostOrigin = host
    ? await host.evaluate(() => (globalThis as unknown as PerformanceGlobals).performance.timeOrigin)
    : NaN;
  const page = await tab.evaluate(() => {
    const { performance } = globalThis as unknown as PerformanceGlobals;
    const navigation = performance.getEntriesByType('navigation')[0];
    const resources = performance.getEntriesByType('resource').filter((entry) => /\.(js|css)(\?|$)/.test(entry.name));
    const document = (globalThis as unknown as PageGlobals).document;
    const app = { ...document.querySelector('#app')!.dataset, ...document.querySelector('#app > *')!.dataset };
    return {
      origin: performance.timeOrigin,
      html: performance.timeOrigin + (navigation?.responseEnd ?? NaN),
      // Parsed (its inline script compiled); a module script runs after this.
      parsed: performance.timeOrigin + (navigation?.domInteractive ?? NaN),
      scripts: performance.timeOrigin + Math.max(...resources.map((entry) => entry.responseEnd)),
      files: resources.length,
      bytes: resources.reduce((sum, entry) => sum + (entry.decodedBodySize ?? 0), 0),
      each: resources.map((entry) => ({
        name: entry.name.replace(/\?.*$/, '').split('/').pop(),
        from: performance.timeOrigin + entry.startTime,
        to: performance.timeOrigin + entry.responseEnd,
        bytes: entry.decodedBodySize ?? 0,
      })),
      marks: { ...app },
    };
  });
  const mark = (name: string): number => Number(page.marks[name]);
  const steps: Array<[string, number]> = [
    ['the extension was asked', mark('openedAt')],
    ['made the panel', mark('panelAt')],
    ['gave it the page', mark('htmlAt')],
    ['VS Code made the webview frame', hostOrigin],
    ['its content frame', page.origin],
    ['our HTML arrived', page.html],
    ['parsed', page.parsed],
    // The page carries its script and style inline (extension/webviewHtml.ts): files only if it loads some.
    ...(page.files > 0
      ? [
          [`our ${page.files} scripts/styles loaded (${Math.round(page.bytes / 1024)} KB)`, page.scripts] as [
            string,
            number,
          ],
        ]
      : []),
    ['our script ran', mark('startedAt')],
    ['it read what to show', mark('showAt')],
    ['first spans', mark('firstSpansAt')],
    ['first painted', paintedAt],
  ];
  const vscodeShare = page.origin - mark('htmlAt') + (mark('openedAt') - clickedAt);
  const ours = paintedAt - clickedAt - vscodeShare;
  const files = page.each
    .map(
      (file) =>
        `${file.name} ${Math.round(file.bytes / 1024)} KB +${Math.round(file.from - clickedAt)}→+${Math.round(file.to - clickedAt)}`,
    )
    .join(', ');
  return `${steps.map(([label, at]) => `${label} +${Math.round(at - clickedAt)}`).join(', ')} ms after the click (${files || 'no script or style files: inline in the page'}); VS Code's own start-up (the click reaching the extension, the panel's two frames) ${Math.round(vscodeShare)} ms, ours (the panel, our page's load, script, data and paint) ${Math.round(ours)} ms`;
}

export const median = (values: number[]): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

/**
 * The webview's document as seen by functions playwright runs there: this file is compiled without
 * the DOM library, and the webview's CSP forbids evaluating strings.
 */
export interface WebviewDocument {
  querySelector(selector: string): { textContent: string | null } | null;
  querySelectorAll(selector: string): { length: number };
}

/** When the webview saw the click on a rollout row, and painted the first frame with its steps. */
export interface OpeningTimes {
  click?: number;
  painted?: number;
}

/**
 * Runs in the webview: records (in `lightningOpening`) the click event's time and the time of the
 * frame after the one that painted the first steps matching `selector` (an upper bound of the paint).
 */
export function watchOpening(selector: string): void {
  const page = globalThis as unknown as {
    lightningOpening: OpeningTimes;
    document: WebviewDocument & {
      body: unknown;
      addEventListener(type: string, listener: () => void, options: object): void;
    };
    performance: { now(): number };
    requestAnimationFrame(callback: () => void): void;
    MutationObserver: new (callback: (records: unknown, observer: { disconnect(): void }) => void) => {
      observe(target: unknown, options: object): void;
    };
  };
  const times: OpeningTimes = {};
  page.lightningOpening = times;
  page.document.addEventListener('click', () => (times.click ??= page.performance.now()), {
    capture: true,
    once: true,
  });
  new page.MutationObserver((_records, observer) => {
    if (times.click === undefined || page.document.querySelectorAll(selector).length === 0) return;
    observer.disconnect();
    // The frame with the steps is painted after the first callback: the second one runs in the next frame.
    page.requestAnimationFrame(() => page.requestAnimationFrame(() => (times.painted = page.performance.now())));
  }).observe(page.document.body, { childList: true, subtree: true });
}
