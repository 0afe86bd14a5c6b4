/**
 * The editor tabs in a real VS Code (code-server + chromium), on a store made before the daemon starts
 * (test/helpers/editorStore.ts): a click in the side bar's list opens a 2,000-span rollout in a preview tab (its first
 * paint timed on the page's clock); j / k step between LLM calls, `1` rates the selected step and `c` comments on it
 * (both land in the store); the timeline is zoomed and panned (its frame cost printed); two 200-step rollouts marked in
 * the list are compared, then another pair in the same (preview) Compare tab; a GRPO run's tab opens, its best rollout
 * of iteration 1 is one click away, and Use on a checkpoint makes the daemon serve it; nothing is clipped (element
 * bounds inside their containers, the waterfall's canvas text inside its plot) at the default sidebar width and at
 * 1280×800; after a window reload the tabs are back. Times are printed, never asserted. Screenshots go to
 * test-results/e2e/.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Frame, Page } from 'playwright-core';
import { editorStore, type EditorStore } from '../helpers/editorStore';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { frameWith, runCommand } from '../helpers/codeServer';
import { waitFor } from '../helpers/tmp';
import { runTitle } from '../../trainer-daemon/protocol/ui/trainingRunFormat';
import { CHART_CHECKS, clippedIn, type BoxGlobals } from '../helpers/clipping';
import { median, startUp, type PageGlobals } from '../helpers/webviewTiming';

describe(
  'editor tabs: a rollout, a comparison, a training run (code-server + chromium)',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let seeded: EditorStore;
    let page: Page;
    /** The run tab's title, once the run is read. */
    let runTab = '';

    before(async () => {
      session = await startE2eSession();
      // The extension starts its daemon on first use: the store is made before that.
      seeded = await editorStore(session.workspace);
      page = session.page;
    });

    after(() => session?.close('editor-tabs'));

    it('a click opens a 2,000-span rollout in a preview tab; j / k step, 1 rates the step, c comments on it', async () => {
      await page.locator('.activitybar [aria-label^="Lightning"]').first().click();
      await session.panel.locator(`.rollout-row[data-rollout-id="${seeded.big}"]`).waitFor({ timeout: 90_000 });
      const panel = await frameWith(page, '.rollout-list');
      const clickedAt = await panel.evaluate((id) => {
        const at = (globalThis as unknown as PageGlobals).Date.now();
        (globalThis as unknown as PageGlobals).document.querySelector(`.rollout-row[data-rollout-id="${id}"]`)!.click();
        return at;
      }, seeded.big);
      const cold = await frameWith(page, '.rollout-tab .timeline[data-complete-paint-at]', 120_000);
      const marks = await cold.evaluate(() => ({
        ...(globalThis as unknown as PageGlobals).document.querySelector('.timeline')!.dataset,
        ...(globalThis as unknown as PageGlobals).document.querySelector('#app')!.dataset,
      }));
      console.log(
        `# measured: 2,000-span rollout in a new tab after the click: first rows painted ${Number(marks.firstPaintAt) - clickedAt} ms, all ${marks.drawn} spans painted ${Number(marks.completePaintAt) - clickedAt} ms (target ≤ 300 ms)`,
      );
      console.log(
        `# measured: the new rollout tab's start-up: ${await startUp(cold, clickedAt, Number(marks.firstPaintAt))}`,
      );
      assert.equal(marks.drawn, '2001');
      await page.locator('.tabs-container .tab', { hasText: 'big-2000 (preview)' }).waitFor({ timeout: 15_000 });
      // The tab shows the steps: the panel shows the rollout's summary with Show Tab and Show Here, not the steps
      // again.
      await session.panel
        .locator(`.detail[data-rollout-id="${seeded.big}"][data-in-tab="true"] .in-tab-note .show-here`)
        .waitFor({ timeout: 30_000 });
      assert.equal(
        await session.panel.locator(`.detail[data-rollout-id="${seeded.big}"] details.step`).count(),
        0,
        'no steps repeated in the panel',
      );
      await session.shot('tabs-01-rollout-preview');

      // A click on another rollout shows it in the same preview tab (no new one): the tab's own time.
      const reusedAt = await panel.evaluate((id) => {
        const at = (globalThis as unknown as PageGlobals).Date.now();
        (globalThis as unknown as PageGlobals).document.querySelector(`.rollout-row[data-rollout-id="${id}"]`)!.click();
        return at;
      }, seeded.big2);
      await page.locator('.tabs-container .tab', { hasText: 'big-2000-b (preview)' }).waitFor({ timeout: 30_000 });
      assert.equal(
        await page.locator('.tabs-container .tab', { hasText: '(preview)' }).count(),
        1,
        'one preview tab, reused',
      );
      const tab = await frameWith(
        page,
        `.rollout-tab[data-rollout-id="${seeded.big2}"] .timeline[data-complete-paint-at]`,
        120_000,
      );
      const reused = await tab.evaluate(() => ({
        ...(globalThis as unknown as PageGlobals).document.querySelector('.rollout-tab')!.dataset,
        ...(globalThis as unknown as PageGlobals).document.querySelector('.timeline')!.dataset,
      }));
      console.log(
        `# measured: 2,000-span rollout into the open preview tab after the click: first rows painted ${Number(reused.firstPaintAt) - reusedAt} ms, all spans painted ${Number(reused.completePaintAt) - reusedAt} ms (target ≤ 300 ms); the page was told to show it +${Number(reused.showAt) - reusedAt} ms, its first spans came +${Number(reused.firstSpansAt) - reusedAt} ms`,
      );

      // The first LLM call is selected; j j goes to the third, k back to the second.
      const selected = (): Promise<string | undefined> =>
        tab.evaluate(
          () => (globalThis as unknown as PageGlobals).document.querySelector('.span-detail')!.dataset.spanId,
        );
      const first = await selected();
      await tab.locator('.timeline-scroller').focus();
      await page.keyboard.press('j');
      await page.keyboard.press('j');
      await page.keyboard.press('k');
      const second = await selected();
      assert.notEqual(second, first);
      await tab.locator('.conversation .turn.role-user').first().waitFor({ timeout: 15_000 });
      await page.keyboard.press('1');
      await page.keyboard.press('c');
      await page.keyboard.type('the tool call was right');
      await page.keyboard.press('Enter');
      const rewards = await waitFor(
        async () => {
          const detail = await session.show(seeded.big2);
          const step = detail.rewards.filter((reward) => reward.spanId === second && reward.source === 'human');
          return step.length >= 2 ? step : undefined;
        },
        'the step rewards in the store',
        30_000,
      );
      assert.deepEqual(
        rewards.map((reward) => [reward.value, reward.comment]),
        [
          [1, null],
          [1, 'the tool call was right'],
        ],
      );
      await tab
        .locator('.step-rewards .comment-text', { hasText: 'the tool call was right' })
        .waitFor({ timeout: 15_000 });
      // Annotating keeps the tab (no longer a preview).
      await page
        .locator('.tabs-container .tab', { hasText: /^big-2000-b$/ })
        .first()
        .waitFor({ timeout: 15_000 });
      await session.shot('tabs-02-step-annotated');

      // Zoom and pan: the page's own cost per frame, and the frame interval.
      const frames = await tab.evaluate(async () => {
        const g = globalThis as unknown as PageGlobals & {
          WheelEvent: new (type: string, init: object) => unknown;
          performance: { now(): number };
        };
        const scroller = g.document.querySelector('.timeline-scroller')!;
        const timeline = g.document.querySelector('.timeline')!;
        const draws: number[] = [];
        const intervals: number[] = [];
        let last = g.performance.now();
        for (let i = 0; i < 60; i += 1) {
          scroller.dispatchEvent(
            new g.WheelEvent('wheel', {
              deltaY: i < 30 ? -80 : 0,
              deltaX: i < 30 ? 0 : 60,
              ctrlKey: i < 30,
              clientX: 700,
              clientY: 300,
              bubbles: true,
              cancelable: true,
            }),
          );
          await new Promise<void>((resolve) => g.requestAnimationFrame(() => g.requestAnimationFrame(resolve)));
          draws.push(Number(timeline.dataset.lastDrawMs));
          const now = g.performance.now();
          intervals.push((now - last) / 2);
          last = now;
        }
        return { draws, intervals };
      });
      console.log(
        `# measured: timeline zoom/pan, 60 frames: draw median ${median(frames.draws).toFixed(2)} ms, frame interval median ${median(frames.intervals).toFixed(1)} ms (target ≤ 16.7 ms)`,
      );
      await session.shot('tabs-03-zoomed');
    });

    it('two rollouts marked in the list open side by side in a Compare tab', async () => {
      const panel = await frameWith(page, '.rollout-list');
      for (const id of [seeded.before, seeded.after])
        await session.panel.locator(`.rollout-row[data-rollout-id="${id}"]`).click({ modifiers: ['Control'] });
      await session.panel.locator('.toolbar .compare', { hasText: 'Compare 2' }).waitFor({ timeout: 10_000 });
      const clickedAt = await panel.evaluate(() => {
        const at = (globalThis as unknown as PageGlobals).Date.now();
        (globalThis as unknown as PageGlobals).document.querySelector('.toolbar .compare')!.click();
        return at;
      });
      const compare = await frameWith(page, '.compare-tab[data-complete-at]', 120_000);
      const marks = await compare.evaluate(() => ({
        ...(globalThis as unknown as PageGlobals).document.querySelector('.compare-tab')!.dataset,
      }));
      console.log(
        `# measured: compare view of two 200-step rollouts after the click: first aligned pairs painted ${Number(marks.paintedAt) - clickedAt} ms (laid out and on screen ${Number(marks.firstFrameAt) - clickedAt} ms), all ${marks.pairs} pairs aligned ${Number(marks.completeAt) - clickedAt} ms (target ≤ 300 ms); the page's own work: ${marks.firstRenderMs} ms for the first pairs, ${marks.completeRenderMs} ms for all`,
      );
      console.log(
        `# measured: the compare tab's start-up: ${await startUp(compare, clickedAt, Number(marks.paintedAt))}`,
      );
      assert.equal(marks.pairs, '200');
      // The first pair that differs is open, with its words diffed.
      await compare.locator('.compare-pair[open] .diff-added').first().waitFor({ timeout: 10_000 });
      await session.shot('tabs-04-compare');

      // Another pair (a third mark drops the oldest) shows in the same Compare tab, a preview: the tab's own time.
      await session.panel.locator(`.rollout-row[data-rollout-id="${seeded.after2}"]`).click({ modifiers: ['Control'] });
      await session.panel.locator('.toolbar .compare', { hasText: 'Compare 2' }).waitFor({ timeout: 10_000 });
      const reusedAt = await panel.evaluate(() => {
        const at = (globalThis as unknown as PageGlobals).Date.now();
        (globalThis as unknown as PageGlobals).document.querySelector('.toolbar .compare')!.click();
        return at;
      });
      const reused = await frameWith(page, `.compare-tab[data-right="${seeded.after2}"][data-complete-at]`, 120_000);
      const again = await reused.evaluate(() => ({
        ...(globalThis as unknown as PageGlobals).document.querySelector('.compare-tab')!.dataset,
      }));
      console.log(
        `# measured: compare view of two 200-step rollouts into the open Compare tab after the click: first aligned pairs painted ${Number(again.paintedAt) - reusedAt} ms (laid out and on screen ${Number(again.firstFrameAt) - reusedAt} ms), all ${again.pairs} pairs aligned ${Number(again.completeAt) - reusedAt} ms (target ≤ 300 ms); the page was told to show it +${Number(again.showAt) - reusedAt} ms, its first spans came +${Number(again.firstSpansAt) - reusedAt} ms`,
      );
      assert.equal(again.pairs, '200');
      assert.equal(
        await page.locator('.tabs-container .tab', { hasText: 'Compare' }).count(),
        1,
        'one Compare tab, reused',
      );
      await page.locator('.tabs-container .tab', { hasText: /Compare .*\(preview\)/ }).waitFor({ timeout: 15_000 });
    });

    it('a training run opens in a tab: iteration 1’s best rollout one click away, Use on a checkpoint serves it', async () => {
      const panelLocator = session.panel;
      await panelLocator.locator('.training-runs > summary').click();
      await panelLocator.locator(`.run-row[data-run-id="${seeded.runId}"]`).click({ timeout: 30_000 });
      await panelLocator.locator('.open-run-tab').click({ timeout: 30_000 });
      const run = await frameWith(page, '.run-tab .run-table tr[data-step="2"]', 60_000);
      assert.ok((await run.locator('.chart-card.large').count()) >= 5, 'full-size charts');
      // The tab and its header name the run by what it trains and when, not by its id.
      runTab = runTitle((await session.showRun(seeded.runId)).run);
      await page.locator('.tabs-container .tab', { hasText: runTab }).waitFor({ timeout: 15_000 });
      assert.equal(await run.locator('.tab-header h2 .title').textContent(), runTab);
      await session.shot('tabs-05-run');
      await run.locator('tr[data-step="1"] .best-rollout').click();
      await frameWith(page, `.rollout-tab .span-detail`, 60_000);
      await page.locator('.tabs-container .tab', { hasText: 'iteration-1-best' }).waitFor({ timeout: 30_000 });

      await page.locator('.tabs-container .tab', { hasText: runTab }).first().click();
      const runAgain = await frameWith(page, '.run-tab .run-table tr[data-step="2"] .use-checkpoint');
      await runAgain.locator('tr[data-step="2"] .use-checkpoint').click();
      await page.locator('.statusbar-item', { hasText: 'step 2' }).waitFor({ timeout: 120_000 });
      const policy = await session.withDaemon((client) => client.request('currentPolicy', {}));
      assert.equal(policy.served?.checkpointId, seeded.checkpointIds[1]);
      await session.shot('tabs-06-checkpoint-in-use');
    });

    it('nothing is clipped at the default sidebar width and at 1280×800: the rollout tab, the run tab, the panel’s run detail', async () => {
      const sizes = [page.viewportSize() ?? { width: 1400, height: 900 }, { width: 1280, height: 800 }];
      const frameOf = async (selector: string): Promise<Frame> => frameWith(page, selector, 60_000);
      try {
        for (const size of sizes) {
          await page.setViewportSize(size);
          const name = `${size.width}x${size.height}`;

          // A rollout of a few spans: the rollout's root row first, the waterfall as tall as its rows, the conversation
          // below.
          await page.locator('.tabs-container .tab', { hasText: 'iteration-1-best' }).first().click();
          const small = await frameOf(
            `.rollout-tab[data-rollout-id="${seeded.best}"] .timeline[data-complete-paint-at]`,
          );
          const layout = await waitFor(
            async () => {
              const read = await small.evaluate(() => {
                const g = globalThis as unknown as BoxGlobals & PageGlobals;
                // No named functions in here: the test's compiler would wrap them in a helper the page lacks.
                const [tab, box, detail] = ['.rollout-tab', '.timeline', '.span-detail'].map((selector) =>
                  Array.from(g.document.querySelectorAll(selector))[0]!.getBoundingClientRect(),
                );
                const timeline = g.document.querySelector('.timeline')!.dataset;
                return {
                  tab: tab!,
                  timeline: box!,
                  detail: detail!,
                  spans: Number(g.document.querySelector('.rollout-tab')!.dataset.spans),
                  textRight: Number(timeline.textRight),
                  plotRight: Number(timeline.plotRight),
                  innerWidth: g.innerWidth,
                };
              });
              return read.timeline.width > 0 && read.textRight > 0 ? read : undefined;
            },
            'the small rollout tab laid out',
            30_000,
          );
          // Rows (the root and the spans) × 22 px, the axis and the handle: sized to its rows, not a fixed box.
          assert.ok(
            Math.abs(layout.timeline.height - ((layout.spans + 1) * 22 + 29)) <= 4,
            `timeline ${layout.timeline.height} px for ${layout.spans} spans: ${(layout.spans + 1) * 22 + 29} px sized to its rows`,
          );
          assert.ok(
            layout.detail.height >= layout.tab.height * 0.45,
            `the conversation gets the space: ${Math.round(layout.detail.height)} of ${Math.round(layout.tab.height)} px`,
          );
          assert.ok(
            layout.textRight <= layout.plotRight && layout.textRight <= layout.timeline.width,
            `the waterfall's texts end at ${layout.textRight} px, its plot at ${layout.plotRight}, the timeline is ${layout.timeline.width} wide`,
          );
          assert.deepEqual(
            await clippedIn(small, [
              {
                container: '.rollout-tab',
                elements:
                  '.tab-header h2, .tab-header vscode-button, .timeline, .timeline-resizer, .span-detail, .detail-head, .step-annotation vscode-button, .step-annotation vscode-textfield',
              },
              { container: '.turn', elements: '.turn-head' },
            ]),
            [],
          );
          await session.shot(`tabs-08-rollout-${name}`);

          // The 2,000-span rollout: the waterfall stops at under half the tab, the rest is the conversation's.
          await page
            .locator('.tabs-container .tab', { hasText: /^big-2000-b/ })
            .first()
            .click();
          const big = await frameOf(`.rollout-tab[data-rollout-id="${seeded.big2}"] .timeline[data-complete-paint-at]`);
          const bigLayout = await big.evaluate(() => {
            const g = globalThis as unknown as BoxGlobals & PageGlobals;
            const [tab, box] = ['.rollout-tab', '.timeline'].map((selector) =>
              Array.from(g.document.querySelectorAll(selector))[0]!.getBoundingClientRect(),
            );
            const timeline = g.document.querySelector('.timeline')!.dataset;
            return {
              tab: tab!,
              timeline: box!,
              textRight: Number(timeline.textRight),
              plotRight: Number(timeline.plotRight),
            };
          });
          assert.ok(
            bigLayout.timeline.height <= bigLayout.tab.height * 0.5,
            `timeline ${bigLayout.timeline.height} of ${bigLayout.tab.height} px`,
          );
          assert.ok(
            bigLayout.textRight <= bigLayout.plotRight,
            `texts end at ${bigLayout.textRight}, the plot at ${bigLayout.plotRight}`,
          );
          assert.deepEqual(
            await clippedIn(big, [
              {
                container: '.rollout-tab',
                elements: '.tab-header vscode-button, .timeline, .span-detail, .step-annotation vscode-button',
              },
            ]),
            [],
          );

          // The run tab: round, labelled axes inside each chart; the smoothing slider; the value under the pointer.
          await page.locator('.tabs-container .tab', { hasText: runTab }).first().click();
          const run = await frameOf('.run-tab .chart-card.large svg');
          assert.deepEqual(
            await clippedIn(run, [
              ...CHART_CHECKS,
              { container: '.run-tab', elements: '.tab-header h2, .chart-tools > *, .smoothing-control, .chart-card' },
            ]),
            [],
          );
          const reward = run.locator('.chart-card.large[data-metric="reward/mean"]');
          assert.ok((await reward.locator('.axis-title').count()) === 2, 'x and y axis titles');
          const labels = await reward.locator('.y-tick').allTextContents();
          assert.ok(
            labels.every((label) => /^\d\.\d$/.test(label)),
            `round reward ticks: ${labels.join(' ')}`,
          );
          await reward.locator('svg').scrollIntoViewIfNeeded();
          const svgBox = (await reward.locator('svg').boundingBox())!;
          await page.mouse.move(svgBox.x + svgBox.width * 0.9, svgBox.y + svgBox.height / 2);
          await reward.locator('.chart-readout', { hasText: /^iteration \d+: / }).waitFor({ timeout: 10_000 });
          await session.shot(`tabs-09-run-${name}`);

          // The panel's run detail at the sidebar's width: Cancel / Open in Editor and the small multiples inside it.
          const panel = await frameOf('.run-detail .charts .chart-card svg');
          assert.deepEqual(
            await clippedIn(panel, [
              ...CHART_CHECKS,
              {
                container: '.run-detail',
                elements: '.run-header > *, .smoothing-control, .charts .chart-card, .checkpoint-row vscode-button',
              },
            ]),
            [],
          );
          await session.shot(`tabs-10-panel-run-${name}`);
        }
      } finally {
        await page.setViewportSize(sizes[0]!);
      }
    });

    it('after a window reload the tabs are back', async () => {
      const titles = async (): Promise<string[]> =>
        (await page.locator('.tabs-container .tab').allInnerTexts()).map((text) => text.trim());
      const beforeReload = await titles();
      // VS Code's own reload saves the window's layout first; a page reload raced that save, and lost the editor
      // group opened last (Best's tab beside) in two of six runs once the tests before it got quicker.
      const reloaded = page.waitForEvent('load', { timeout: 60_000 });
      await runCommand(page, 'Developer: Reload Window');
      await reloaded;
      await page.locator('.monaco-workbench .statusbar').waitFor({ timeout: 60_000 });
      let seen: string[] = [];
      const back = await waitFor(
        async () => {
          const now = await titles();
          seen = now;
          return beforeReload.every((title) => now.includes(title)) ? now : undefined;
        },
        `the tabs ${beforeReload.join(', ')} after the reload`,
        60_000,
      ).catch(async (error: unknown) => {
        // What came back instead, for the failure's report.
        console.log(`# the tabs after the reload: ${JSON.stringify(seen)}`);
        await session.shot('tabs-07-after-reload-failed');
        throw error;
      });
      assert.ok(back.some((title) => title.startsWith('Compare')));
      await page.locator('.tabs-container .tab', { hasText: 'big-2000-b' }).first().click();
      await frameWith(page, '.rollout-tab .timeline[data-complete-paint-at]', 120_000);
      await page.locator('.tabs-container .tab', { hasText: 'Compare' }).first().click();
      await frameWith(page, '.compare-tab[data-painted-at]', 120_000);
      await session.shot('tabs-07-after-reload');
    });
  },
);
