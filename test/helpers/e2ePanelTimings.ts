/**
 * A step of editor.test.ts's session that measures rather than checks: how soon a new rollout shows in the panel
 * after its first span is stored, and how soon a 2,000-span rollout's steps are painted once opened. The figures
 * are printed (`# target: …` lines in the test's log), never asserted; what is asserted is that both happen.
 */
import type { Page } from 'playwright-core';
import type { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { frameWith } from './codeServer';
import { panelLlmSpan } from './e2eEditorWorld';
import { watchOpening, type OpeningTimes, type WebviewDocument } from './webviewTiming';

/** The two timings, printed; `client` is an RPC client of the session's daemon, which the rollouts are made through. */
export async function measurePanelTimings(
  page: Page,
  client: RpcClient,
  shot: (name: string) => Promise<unknown>,
): Promise<void> {
  const frame = await frameWith(page, '.rollout-list', 15_000);
  const rowShows = (id: string, text: string): Promise<unknown> =>
    frame.waitForFunction(
      ([selector, expected]) =>
        (globalThis as unknown as { document: WebviewDocument }).document
          .querySelector(selector!)
          ?.textContent?.includes(expected!) === true,
      [`.rollout-row[data-rollout-id="${id}"]`, text],
      { polling: 'raf', timeout: 15_000 },
    );

  const started = performance.now();
  const { rollout } = await client.request('startAgentRun', { label: 'latency probe' });
  await client.request('addSpans', { rolloutId: rollout.id, spans: [panelLlmSpan(0)] });
  const stored = performance.now();
  await rowShows(rollout.id, '1 LLM call');
  const visible = performance.now();
  console.log(
    `# target: new rollout visible in the panel ${(visible - stored).toFixed(0)} ms after its first span was stored (${(visible - started).toFixed(0)} ms after agentRuns/start was sent); target ≤ 300 ms`,
  );

  const big = (await client.request('startAgentRun', { label: 'big rollout' })).rollout;
  await client.request('addSpans', {
    rolloutId: big.id,
    spans: Array.from({ length: 2_000 }, (_, i) => panelLlmSpan(i)),
  });
  await client.request('transitionRollout', { id: big.id, to: 'succeeded' });
  await rowShows(big.id, '2000 LLM calls');
  // Its last change shown too (succeeded): a click while the list redraws the row lands on the row being replaced.
  await frame.waitForSelector(`.rollout-row.status-succeeded[data-rollout-id="${big.id}"]`, { timeout: 15_000 });
  const steps = `.detail[data-rollout-id="${big.id}"] details.step`;
  // The user's wait, on the page's own clock: from the click event to the first frame painted with steps
  // (playwright's click adds its own actionability checks and round trips before the event).
  // The row's click opens its preview tab (the panel then shows a summary); Show Here asks for the steps.
  await frame.click(`.rollout-row[data-rollout-id="${big.id}"]`);
  await frame.waitForSelector(`.detail[data-rollout-id="${big.id}"] .in-tab-note .show-here`, { timeout: 30_000 });
  await frame.evaluate(watchOpening, steps);
  const clicked = performance.now();
  await frame.click(`.detail[data-rollout-id="${big.id}"] .in-tab-note .show-here`);
  const stepsShown = (count: number): Promise<unknown> =>
    frame.waitForFunction(
      ([selector, n]) =>
        (globalThis as unknown as { document: WebviewDocument }).document.querySelectorAll(selector as string).length >=
        (n as number),
      [steps, count],
      { polling: 'raf', timeout: 30_000 },
    );
  await stepsShown(1);
  const firstSteps = performance.now();
  await stepsShown(2_000);
  const all = performance.now();
  const opening = await frame
    .waitForFunction(
      () =>
        (globalThis as unknown as { lightningOpening?: OpeningTimes }).lightningOpening?.painted !== undefined
          ? (globalThis as unknown as { lightningOpening: OpeningTimes }).lightningOpening
          : undefined,
      undefined,
      { timeout: 10_000 },
    )
    .then((handle) => handle.jsonValue() as Promise<OpeningTimes>);
  console.log(
    `# target: a 2,000-span rollout opened: first steps painted ${(opening.painted! - opening.click!).toFixed(0)} ms after Show Here's click event (in the page; playwright's click to first steps: ${(firstSteps - clicked).toFixed(0)} ms), all 2,000 in ${(all - clicked).toFixed(0)} ms; target ≤ 300 ms`,
  );
  await shot('06-big-rollout');
}
