/**
 * What a tab shows, read from the daemon and posted to it: a rollout, its rewards, its spans page by page (the first
 * page small, so that it can ride inside the page itself), and an error shown in the tab. A stream of spans stops
 * when the tab closes or shows something else. detailEditors.ts decides which tabs there are and when they load.
 */
import type * as vscode from 'vscode';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import type { LiveRollouts } from '../liveRollouts';
import { postTo, rolloutIds, titleOf, type Tab } from './editorTab';

/**
 * Spans per message: the first page (a screenful and more of the timeline, slimmed by the daemon) is quick to fetch, so
 * it is usually inside the page itself (detailEditors.ts, FIRST_PAYLOAD_WAIT_MS); the rest follow in larger ones.
 */
const FIRST_SPAN_PAGE = 40;
const SPAN_PAGE = 1_000;

export class TabFeed {
  constructor(
    private readonly live: LiveRollouts,
    private readonly log: vscode.LogOutputChannel,
    /** Whether the tab is still open (a closed tab's stream stops). */
    private readonly isOpen: (tab: Tab) => boolean,
  ) {}

  /**
   * What a tab needs at start (its rollouts with their rewards and spans; a run tab asks for its run), posted as it
   * comes; resolves when the first screen's share is posted (each rollout, its rewards, its first page of spans).
   */
  load(tab: Tab): Promise<void> {
    const firsts: Array<Promise<void>> = [];
    for (const id of rolloutIds(tab.state.target)) {
      let firstPage = (): void => undefined;
      firsts.push(
        this.sendRollout(tab, id),
        this.sendRewards(tab, id),
        new Promise<void>((resolve) => (firstPage = resolve)),
      );
      void this.streamSpans(tab, id, 0, firstPage)
        .catch((error) => this.fail(tab, 'loading spans', error))
        .finally(firstPage);
    }
    return Promise.all(firsts).then(() => undefined);
  }

  /** Shows an error in the tab, and logs it. */
  fail(tab: Tab, what: string, error: unknown): void {
    const text = errorMessage(error);
    this.log.error(`[editors] ${what} failed: ${text}`);
    postTo(tab, { type: 'error', message: text });
  }

  /** Posts the rollout (with where its last attempt ran) and names the tab after it. */
  async sendRollout(tab: Tab, rolloutId: string): Promise<void> {
    try {
      const client = await this.live.supervisor.ensureRunning();
      const { rollout, attempts } = await client.request('getRollout', { id: rolloutId, spans: false });
      const node = attempts.at(-1)?.node;
      postTo(tab, { type: 'rollout', rollout, ...(node ? { node } : {}) });
      tab.known.set(rollout.id, rollout);
      tab.panel.title = titleOf(tab);
    } catch (error) {
      this.fail(tab, `reading rollout ${rolloutId}`, error);
    }
  }

  /** Posts the rollout's rewards; a failure is only logged (the tab keeps the rewards it has). */
  async sendRewards(tab: Tab, rolloutId: string): Promise<void> {
    try {
      const client = await this.live.supervisor.ensureRunning();
      const { items } = await client.request('listRewards', { rolloutId });
      postTo(tab, { type: 'rewards', rolloutId, items });
    } catch (error) {
      this.log.warn(`[editors] cannot refresh rewards of ${rolloutId}: ${errorMessage(error)}`);
    }
  }

  /** A rollout's spans after `afterSequence`, page by page; stops when the tab closes or shows something else. */
  async streamSpans(tab: Tab, rolloutId: string, afterSequence: number, firstPage?: () => void): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    const generation = tab.generation;
    const started = Date.now();
    let fetched = 0;
    const current = (): boolean =>
      this.isOpen(tab) && tab.generation === generation && rolloutIds(tab.state.target).includes(rolloutId);
    for (
      let after = afterSequence, limit = afterSequence === 0 ? FIRST_SPAN_PAGE : SPAN_PAGE;
      current();
      limit = SPAN_PAGE
    ) {
      // Slimmed by the daemon: the timeline and the comparison need the spans' shape, a conversation asks for its whole
      // span.
      const { items } = await client.request('listSpans', { rolloutId, afterSequence: after, limit, slim: true });
      if (!current()) return;
      const complete = items.length < limit;
      fetched += items.length;
      if (complete && afterSequence === 0)
        this.log.info(
          `[editors] ${rolloutId}: ${fetched} spans fetched and posted ${Date.now() - started} ms after the stream started (${started - tab.openedAt} ms after the open)`,
        );
      postTo(tab, { type: 'spans', rolloutId, spans: items, complete });
      firstPage?.();
      if (complete) return;
      after = items.at(-1)!.sequence;
    }
  }
}
