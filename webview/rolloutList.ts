/**
 * The rollout list: newest first, virtualized (only the rows in view exist in the DOM, so 100,000
 * rollouts scroll like 100) and paged lazily through the daemon's cursor as the user scrolls.
 * Live changes update rows in place or insert new ones that match the filter. Keyboard: ↑/↓,
 * PageUp/PageDown, Home/End move the selection; Enter opens the rollout in an editor tab; Space
 * (or Ctrl/⌘+click) marks it for Compare. A click opens a preview tab, a double-click pins it.
 */
import type { Rollout } from '../trainer-daemon/protocol/records';
import { formatDuration, rolloutDuration } from '../trainer-daemon/protocol/format';
import { formatTime, formatTokens, matchesFilter, rewardText, rolloutTitle, STATUS_ICON } from './format';
import type { RolloutFilter } from './protocol';

export const ROW_HEIGHT = 40;
const OVERSCAN = 8;
/** Ask for the next page when this few loaded rows remain below the view. */
const PREFETCH_ROWS = 100;

export interface RolloutListEvents {
  /** A rollout to show in the editor area: a preview (a click) or pinned (a double-click, Enter). */
  open(rollout: Rollout, mode: 'preview' | 'pinned'): void;
  /** The rollouts marked for Compare changed (at most two; the oldest mark goes first). */
  marked(ids: readonly string[]): void;
}

export class RolloutList {
  private rows: Rollout[] = [];
  private readonly positions = new Map<string, number>();
  private nextCursor: string | null = null;
  private loading = false;
  private readonly spacer = document.createElement('div');
  private readonly empty = document.createElement('div');
  private rendered = new Map<number, HTMLElement>();
  selectedId: string | undefined;
  private marks: string[] = [];

  constructor(
    readonly element: HTMLElement,
    private readonly requestPage: (cursor: string | null) => void,
    private readonly onSelect: (rollout: Rollout) => void,
    private readonly events?: RolloutListEvents,
  ) {
    element.classList.add('rollout-list');
    element.tabIndex = 0;
    element.setAttribute('role', 'listbox');
    element.setAttribute('aria-label', 'Rollouts');
    this.spacer.className = 'spacer';
    this.empty.className = 'empty';
    element.append(this.spacer, this.empty);
    element.addEventListener('scroll', () => this.render());
    element.addEventListener('keydown', (event) => this.onKey(event));
    new ResizeObserver(() => this.render()).observe(element);
  }

  get count(): number {
    return this.rows.length;
  }

  /** Starts over (a new filter, a reconnect): the first page is requested by the caller. */
  reset(): void {
    this.rows = [];
    this.positions.clear();
    this.nextCursor = null;
    this.loading = true;
    this.clearRendered();
    this.render();
  }

  addPage(items: readonly Rollout[], nextCursor: string | null): void {
    for (const rollout of items) {
      if (this.positions.has(rollout.id)) continue;
      this.positions.set(rollout.id, this.rows.length);
      this.rows.push(rollout);
    }
    this.nextCursor = nextCursor;
    this.loading = false;
    this.render();
  }

  /** Live changes: update known rows, insert new matching ones at the top (newest first). */
  applyChanges(rollouts: readonly Rollout[], filter: RolloutFilter): void {
    const fresh: Rollout[] = [];
    for (const rollout of rollouts) {
      const position = this.positions.get(rollout.id);
      if (position !== undefined) this.rows[position] = rollout;
      else if (matchesFilter(rollout, filter)) fresh.push(rollout);
    }
    if (fresh.length > 0) {
      fresh.sort((a, b) => b.createdAt - a.createdAt);
      this.rows = [...fresh, ...this.rows];
      this.positions.clear();
      this.rows.forEach((rollout, index) => this.positions.set(rollout.id, index));
      // Keep what the user is looking at in place when rows arrive above it.
      if (this.element.scrollTop > 0) this.element.scrollTop += fresh.length * ROW_HEIGHT;
    }
    this.clearRendered();
    this.render();
  }

  get(id: string): Rollout | undefined {
    const position = this.positions.get(id);
    return position === undefined ? undefined : this.rows[position];
  }

  select(id: string, notify = true): void {
    this.selectedId = id;
    const position = this.positions.get(id);
    if (position !== undefined) this.scrollIntoView(position);
    this.clearRendered();
    this.render();
    const rollout = this.get(id);
    if (notify && rollout) this.onSelect(rollout);
  }

  private scrollIntoView(position: number): void {
    const top = position * ROW_HEIGHT;
    if (top < this.element.scrollTop) this.element.scrollTop = top;
    else if (top + ROW_HEIGHT > this.element.scrollTop + this.element.clientHeight)
      this.element.scrollTop = top + ROW_HEIGHT - this.element.clientHeight;
  }

  private onKey(event: KeyboardEvent): void {
    const current = this.selectedId === undefined ? -1 : (this.positions.get(this.selectedId) ?? -1);
    const page = Math.max(1, Math.floor(this.element.clientHeight / ROW_HEIGHT) - 1);
    const moves: Record<string, number> = {
      ArrowDown: current + 1,
      ArrowUp: current - 1,
      PageDown: current + page,
      PageUp: current - page,
      Home: 0,
      End: this.rows.length - 1,
    };
    const selected = this.selectedId ? this.get(this.selectedId) : undefined;
    if (selected && event.key === 'Enter') return void this.events?.open(selected, 'pinned');
    if (selected && event.key === ' ') {
      event.preventDefault();
      return this.toggleMark(selected.id);
    }
    const target = moves[event.key];
    if (target === undefined || this.rows.length === 0) return;
    event.preventDefault();
    this.select(this.rows[Math.min(this.rows.length - 1, Math.max(0, target))]!.id);
  }

  /** Marks a rollout for Compare (or unmarks it); a third mark drops the oldest. */
  toggleMark(id: string): void {
    this.marks = this.marks.includes(id) ? this.marks.filter((mark) => mark !== id) : [...this.marks, id].slice(-2);
    this.clearRendered();
    this.render();
    this.events?.marked(this.marks);
  }

  get markedIds(): readonly string[] {
    return this.marks;
  }

  private clearRendered(): void {
    for (const row of this.rendered.values()) row.remove();
    this.rendered.clear();
  }

  private render(): void {
    this.spacer.style.height = `${this.rows.length * ROW_HEIGHT}px`;
    this.empty.textContent =
      this.rows.length === 0
        ? this.loading
          ? 'Loading…'
          : 'No rollouts yet. Run an agent with “Lightning: Debug with Lightning”.'
        : '';
    const first = Math.max(0, Math.floor(this.element.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(
      this.rows.length - 1,
      Math.ceil((this.element.scrollTop + this.element.clientHeight) / ROW_HEIGHT) + OVERSCAN,
    );
    for (const [index, row] of this.rendered) {
      if (index < first || index > last) {
        row.remove();
        this.rendered.delete(index);
      }
    }
    for (let index = first; index <= last; index += 1) {
      if (this.rendered.has(index)) continue;
      const row = this.renderRow(this.rows[index]!, index);
      this.rendered.set(index, row);
      this.element.append(row);
    }
    if (!this.loading && this.nextCursor !== null && last >= this.rows.length - PREFETCH_ROWS) {
      this.loading = true;
      this.requestPage(this.nextCursor);
    }
  }

  private renderRow(rollout: Rollout, index: number): HTMLElement {
    const row = document.createElement('div');
    row.className = `rollout-row status-${rollout.status}${rollout.id === this.selectedId ? ' selected' : ''}${this.marks.includes(rollout.id) ? ' marked' : ''}`;
    row.dataset.rolloutId = rollout.id;
    row.setAttribute('role', 'option');
    row.setAttribute('aria-selected', String(rollout.id === this.selectedId));
    row.style.top = `${index * ROW_HEIGHT}px`;
    const tokens = rollout.promptTokens + rollout.completionTokens;
    row.innerHTML = `<div class="line1"><span class="status" title="${rollout.status}">${STATUS_ICON[rollout.status]}</span><span class="title"></span><span class="reward"></span></div>
<div class="line2"><span>${rollout.mode}</span><span class="llm-calls">${rollout.llmCalls} LLM call${rollout.llmCalls === 1 ? '' : 's'}</span><span>${formatTokens(tokens)} tok</span><span>${formatDuration(rolloutDuration(rollout))}</span><span class="time">${formatTime(rollout.createdAt)}</span></div>`;
    row.querySelector('.title')!.textContent = rolloutTitle(rollout);
    row.querySelector('.reward')!.textContent = rewardText(rollout.reward);
    row.addEventListener('click', (event) => {
      this.element.focus();
      if (event.ctrlKey || event.metaKey) return this.toggleMark(rollout.id);
      // The tab first: a new webview takes the editor longest to make; the panel's own detail follows.
      this.events?.open(rollout, 'preview');
      this.select(rollout.id);
    });
    row.addEventListener('dblclick', () => this.events?.open(rollout, 'pinned'));
    return row;
  }
}
