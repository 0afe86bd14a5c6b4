/**
 * The rollout list: virtualized (only the rows in view exist in the DOM, so 100,000 rollouts scroll
 * like 100) and paged lazily through the daemon's cursor as the user scrolls. Grouped by origin: the
 * user's own runs (debug sessions, `lightning run`, API clients) first, newest first; then one
 * collapsed row per run, with its counts from `rollouts/groups`: a training run (named by its algorithm,
 * model, dataset and start) holds its batches (each iteration, each validation), collapsed too; a dataset
 * run holds its rollouts. An expanded batch lists its rollouts beneath it, each titled by its task. Runs
 * past the daemon's limit are one "more runs" row with their count, which asks for more. A list scoped to
 * one dataset or batch is flat. Live changes update rows in place or insert new ones that match the
 * filter. Keyboard: ↑/↓, PageUp/PageDown, Home/End move the selection; Enter opens the rollout in an
 * editor tab (on a run or a batch: expands or collapses it; on "more runs": asks for them); Space (or
 * Ctrl/⌘+click) marks a rollout for Compare. A click opens a preview tab, a double-click pins it.
 */
import type { Rollout } from '../trainer-daemon/protocol/records';
import type { RolloutGroups, RolloutRunGroup } from '../trainer-daemon/protocol/rpc';
import { matchesFilter } from '../trainer-daemon/protocol/ui/rolloutText';
import { assertNever } from '../trainer-daemon/protocol/assert';
import type { RolloutFilter } from '../trainer-daemon/protocol/ui/panelMessages';
import {
  fillGroupRow,
  fillRolloutRow,
  GROUP_ROW_HTML,
  itemKey,
  ROLLOUT_ROW_HTML,
  runKey,
  type GroupItem,
  type Item,
} from './rolloutRows';

export const ROW_HEIGHT = 40;
const OVERSCAN = 8;
/** Ask for the next page when this few loaded rows remain below the view. */
const PREFETCH_ROWS = 100;

export interface RolloutListEvents {
  /** A rollout to show in the editor area: a preview (a click) or pinned (a double-click, Enter). */
  open(rollout: Rollout, mode: 'preview' | 'pinned'): void;
  /** The rollouts marked for Compare changed (at most two; the oldest mark goes first). */
  marked(ids: readonly string[]): void;
  /** The "more runs" row was chosen: ask the daemon for more runs. */
  moreRuns(): void;
}

/** Where a page goes: the own runs (null) or one batch's rollouts (its id). */
export type SectionKey = string | null;

interface Section {
  rows: Rollout[];
  cursor: string | null;
  loading: boolean;
  /** Its first page was asked for. */
  started: boolean;
}

export class RolloutList {
  /** Grouped by origin (the whole store) or flat (a dataset's or a batch's rollouts). */
  private grouped = true;
  private sections = new Map<SectionKey, Section>();
  private groups: RolloutGroups | undefined;
  private canAskMore = true;
  private readonly expanded = new Set<string>();
  private items: Item[] = [];
  /** Item index by rollout id. */
  private readonly positions = new Map<string, number>();
  private readonly spacer = document.createElement('div');
  private readonly empty = document.createElement('div');
  /**
   * The rows in the document, by item key (itemKey). A change (a rollout's status, a selection, rows arriving above)
   * updates them in place: a row replaced under the pointer between press and release loses the user's click.
   */
  private readonly rendered = new Map<string, HTMLElement>();
  /** Each rendered row's item and position, as its last update left them (what its click acts on). */
  private readonly shown = new WeakMap<HTMLElement, { item: Item; index: number }>();
  /** The items changed since the rows were last updated: the next render updates every row it keeps. */
  private stale = false;
  selectedId: string | undefined;
  private marks: string[] = [];

  constructor(
    readonly element: HTMLElement,
    /** Asks for a section's page (the first with a null cursor). */
    private readonly requestPage: (section: SectionKey, cursor: string | null) => void,
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

  /** The rollouts loaded (not the count: that is the daemon's, `rollouts/groups`). */
  get count(): number {
    let loaded = 0;
    for (const section of this.sections.values()) loaded += section.rows.length;
    return loaded;
  }

  /** The runs shown, newest first. */
  get runRows(): readonly RolloutRunGroup[] {
    return this.groups?.runs ?? [];
  }

  /**
   * Starts over (a new filter, a reconnect); `grouped`: by origin, else flat. The first page is requested by the
   * caller.
   */
  reset(grouped: boolean): void {
    this.grouped = grouped;
    this.sections = new Map([[null, { rows: [], cursor: null, loading: true, started: true }]]);
    this.groups = undefined;
    this.rebuild();
  }

  addPage(section: SectionKey, items: readonly Rollout[], nextCursor: string | null): void {
    const target = this.sections.get(section);
    if (!target) return;
    const known = new Set(target.rows.map((rollout) => rollout.id));
    for (const rollout of items) if (!known.has(rollout.id)) target.rows.push(rollout);
    target.cursor = nextCursor;
    target.loading = false;
    this.rebuild();
  }

  /**
   * The daemon's counts per run and batch (grouped lists only): run rows follow the own runs. `canAskMore`: whether
   * the "more runs" row may ask for more (false once the daemon's limit is reached: then it says to filter).
   */
  setGroups(groups: RolloutGroups, canAskMore = true): void {
    if (!this.grouped) return;
    this.groups = groups;
    this.canAskMore = canAskMore;
    const shown = new Set(
      groups.runs.flatMap((run) =>
        run.kind === 'training' ? run.batches.map((batch) => batch.batchId) : [run.batchId],
      ),
    );
    for (const key of [...this.sections.keys()]) if (key !== null && !shown.has(key)) this.sections.delete(key);
    this.rebuild();
  }

  /**
   * Expands a run or a batch (`runKey`, or a batch's id) or collapses it; a batch's rollouts (a dataset run's,
   * or a training run's batch's) are asked for the first time it opens.
   */
  toggleGroup(key: string): void {
    if (this.expanded.has(key)) this.expanded.delete(key);
    else {
      this.expanded.add(key);
      if (!key.startsWith('run:') && !this.sections.get(key)?.started) {
        this.sections.set(key, { rows: [], cursor: null, loading: true, started: true });
        this.requestPage(key, null);
      }
    }
    this.rebuild();
  }

  isExpanded(key: string): boolean {
    return this.expanded.has(key);
  }

  /**
   * Live changes: update known rows, insert new matching ones at the top of their section. Returns
   * whether the counts changed (a new rollout, a status that moved): the caller then asks for the groups again.
   */
  applyChanges(rollouts: readonly Rollout[], filter: RolloutFilter): boolean {
    let countsChanged = false;
    for (const rollout of rollouts) {
      const key: SectionKey = this.grouped ? rollout.batchId : null;
      const section = this.sections.get(key);
      const index = section?.rows.findIndex((row) => row.id === rollout.id) ?? -1;
      if (section && index >= 0) {
        if (section.rows[index]!.status !== rollout.status) countsChanged = true;
        section.rows[index] = rollout;
      } else if (matchesFilter(rollout, filter)) {
        countsChanged = true;
        if (!section) continue;
        section.rows.unshift(rollout);
      }
    }
    this.rebuild();
    return countsChanged;
  }

  get(id: string): Rollout | undefined {
    const position = this.positions.get(id);
    const item = position === undefined ? undefined : this.items[position];
    return item?.kind === 'rollout' ? item.rollout : undefined;
  }

  select(id: string, notify = true): void {
    this.selectedId = id;
    const position = this.positions.get(id);
    if (position !== undefined) this.scrollIntoView(position);
    this.stale = true;
    this.render();
    const rollout = this.get(id);
    if (notify && rollout) this.onSelect(rollout);
  }

  /** Marks a rollout for Compare (or unmarks it); a third mark drops the oldest. */
  toggleMark(id: string): void {
    this.marks = this.marks.includes(id) ? this.marks.filter((mark) => mark !== id) : [...this.marks, id].slice(-2);
    this.stale = true;
    this.render();
    this.events?.marked(this.marks);
  }

  get markedIds(): readonly string[] {
    return this.marks;
  }

  /**
   * The items in order: the own runs (or the flat list), then each run and, expanded, its batches (a training
   * run's) or its rollouts (a dataset run's), each expanded batch's rollouts; last, the runs left out.
   */
  private rebuild(): void {
    // What the user is looking at stays in place when rows arrive (or runs move) above it: the item at the top of the
    // view, unless the view is at the very top (where the newest rows are meant to be seen arriving).
    const topIndex = Math.floor(this.element.scrollTop / ROW_HEIGHT);
    const top = this.element.scrollTop > 0 ? this.items[topIndex] : undefined;
    const anchor = top === undefined ? undefined : itemKey(top);
    const items: Item[] = (this.sections.get(null)?.rows ?? []).map((rollout) => ({
      kind: 'rollout',
      rollout,
      depth: 0,
    }));
    const rolloutsOf = (batchId: string, depth: number): Item[] =>
      (this.sections.get(batchId)?.rows ?? []).map((rollout) => ({ kind: 'rollout', rollout, depth }));
    if (this.grouped && this.groups) {
      for (const run of this.groups.runs) {
        const expanded = this.expanded.has(runKey(run));
        items.push({ kind: 'run', run, expanded });
        if (!expanded) continue;
        if (run.kind === 'batch') {
          items.push(...rolloutsOf(run.batchId, 1));
          continue;
        }
        for (const batch of run.batches) {
          const open = this.expanded.has(batch.batchId);
          items.push({ kind: 'batch', batch, run, expanded: open });
          if (open) items.push(...rolloutsOf(batch.batchId, 2));
        }
      }
      const { total, ungrouped, runs, runCount } = this.groups;
      if (runCount > runs.length)
        items.push({
          kind: 'more',
          runs: runCount - runs.length,
          rollouts: total - ungrouped - runs.reduce((sum, run) => sum + run.count, 0),
        });
    }
    this.items = items;
    this.positions.clear();
    items.forEach((item, index) => item.kind === 'rollout' && this.positions.set(item.rollout.id, index));
    // Scrolled before the rows are updated: the rows in view stay the rows in view, their elements kept (a row that
    // left the range for one render would be made anew, and a click on it lost).
    const moved = anchor === undefined ? -1 : items.findIndex((item) => itemKey(item) === anchor);
    if (moved >= 0 && moved !== topIndex) {
      this.spacer.style.height = `${items.length * ROW_HEIGHT}px`;
      this.element.scrollTop += (moved - topIndex) * ROW_HEIGHT;
    }
    this.stale = true;
    this.render();
  }

  private scrollIntoView(position: number): void {
    const top = position * ROW_HEIGHT;
    if (top < this.element.scrollTop) this.element.scrollTop = top;
    else if (top + ROW_HEIGHT > this.element.scrollTop + this.element.clientHeight)
      this.element.scrollTop = top + ROW_HEIGHT - this.element.clientHeight;
  }

  /** The item the keyboard is on: the selected rollout, else a focused group row. */
  private focusedIndex = -1;

  private onKey(event: KeyboardEvent): void {
    const selectedIndex = this.selectedId === undefined ? -1 : (this.positions.get(this.selectedId) ?? -1);
    const current = this.focusedIndex >= 0 ? this.focusedIndex : selectedIndex;
    const focused = this.items[current];
    if (focused && focused.kind !== 'rollout' && (event.key === 'Enter' || event.key === ' ')) {
      event.preventDefault();
      return this.activate(focused);
    }
    const selected = this.selectedId ? this.get(this.selectedId) : undefined;
    if (selected && event.key === 'Enter') return void this.events?.open(selected, 'pinned');
    if (selected && event.key === ' ') {
      event.preventDefault();
      return this.toggleMark(selected.id);
    }
    const page = Math.max(1, Math.floor(this.element.clientHeight / ROW_HEIGHT) - 1);
    const moves: Record<string, number> = {
      ArrowDown: current + 1,
      ArrowUp: current - 1,
      PageDown: current + page,
      PageUp: current - page,
      Home: 0,
      End: this.items.length - 1,
    };
    const target = moves[event.key];
    if (target === undefined || this.items.length === 0) return;
    event.preventDefault();
    const index = Math.min(this.items.length - 1, Math.max(0, target));
    const item = this.items[index]!;
    if (item.kind === 'rollout') {
      this.focusedIndex = -1;
      this.select(item.rollout.id);
    } else {
      this.focusedIndex = index;
      this.scrollIntoView(index);
      this.stale = true;
      this.render();
    }
  }

  /** A run or batch row opens or closes; the "more runs" row asks for more. */
  private activate(item: GroupItem): void {
    switch (item.kind) {
      case 'run':
        return this.toggleGroup(runKey(item.run));
      case 'batch':
        return this.toggleGroup(item.batch.batchId);
      case 'more':
        return this.canAskMore ? this.events?.moreRuns() : undefined;
      default:
        return assertNever(item);
    }
  }

  private render(): void {
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    const loading = this.sections.get(null)?.loading ?? false;
    this.empty.textContent =
      this.items.length === 0
        ? loading
          ? 'Loading…'
          : 'No rollouts yet. Run an agent with “Lightning: Debug with Lightning”.'
        : '';
    const first = Math.max(0, Math.floor(this.element.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(
      this.items.length - 1,
      Math.ceil((this.element.scrollTop + this.element.clientHeight) / ROW_HEIGHT) + OVERSCAN,
    );
    const inView = new Map<string, number>();
    for (let index = first; index <= last; index += 1) inView.set(itemKey(this.items[index]!), index);
    for (const [key, row] of this.rendered) {
      if (!inView.has(key)) {
        row.remove();
        this.rendered.delete(key);
      }
    }
    // From the last row in view up, so that a new row goes in before the row that follows it: the document's order is
    // the list's (as a screen reader reads the options).
    let following: HTMLElement | null = null;
    for (const [key, index] of [...inView].reverse()) {
      const item = this.items[index]!;
      let row = this.rendered.get(key);
      if (row) {
        if (this.stale) this.update(row, item, index);
        // A kept row that moved past another (a run that got a newer batch): moved, the same element.
        if (row.nextElementSibling !== following) this.element.insertBefore(row, following);
      } else {
        row = this.create(item);
        this.update(row, item, index);
        this.rendered.set(key, row);
        this.element.insertBefore(row, following);
      }
      following = row;
    }
    this.stale = false;
    this.prefetch(last);
  }

  /** Each shown section whose loaded end is near the view asks for its next page. */
  private prefetch(lastShown: number): void {
    const ends = new Map<SectionKey, number>([[null, -1]]);
    this.items.forEach((item, index) => {
      const key =
        item.kind === 'rollout'
          ? this.grouped
            ? item.rollout.batchId
            : null
          : item.kind === 'batch'
            ? item.batch.batchId
            : item.kind === 'run' && item.run.kind === 'batch'
              ? item.run.batchId
              : undefined;
      if (key !== undefined) ends.set(key, index);
    });
    for (const [key, at] of ends) {
      const section = this.sections.get(key);
      if (!section || section.loading || section.cursor === null || (key !== null && !this.expanded.has(key))) continue;
      if (lastShown >= at - PREFETCH_ROWS) {
        section.loading = true;
        this.requestPage(key, section.cursor);
      }
    }
  }

  /** A row's element for an item of its kind, its parts empty (update fills them); its clicks act on what it shows. */
  private create(item: Item): HTMLElement {
    const row = document.createElement('div');
    row.setAttribute('role', 'option');
    if (item.kind === 'rollout') {
      row.innerHTML = ROLLOUT_ROW_HTML;
      row.addEventListener('click', (event) => {
        const rollout = this.rolloutOf(row);
        if (!rollout) return;
        this.element.focus();
        this.focusedIndex = -1;
        if (event.ctrlKey || event.metaKey) return this.toggleMark(rollout.id);
        // The tab first: a new webview takes the editor longest to make; the panel's own detail follows.
        this.events?.open(rollout, 'preview');
        this.select(rollout.id);
      });
      row.addEventListener('dblclick', () => {
        const rollout = this.rolloutOf(row);
        if (rollout) this.events?.open(rollout, 'pinned');
      });
      return row;
    }
    row.innerHTML = GROUP_ROW_HTML;
    row.addEventListener('click', () => {
      const shown = this.shown.get(row);
      if (!shown || shown.item.kind === 'rollout') return;
      this.element.focus();
      this.focusedIndex = shown.index;
      this.activate(shown.item);
    });
    return row;
  }

  /** The rollout a row shows now. */
  private rolloutOf(row: HTMLElement): Rollout | undefined {
    const shown = this.shown.get(row);
    return shown?.item.kind === 'rollout' ? shown.item.rollout : undefined;
  }

  /** Fills a row (made by create for an item of the same kind) with its item at its position. */
  private update(row: HTMLElement, item: Item, index: number): void {
    this.shown.set(row, { item, index });
    row.style.top = `${index * ROW_HEIGHT}px`;
    if (item.kind === 'rollout')
      fillRolloutRow(row, item.rollout, item.depth, {
        selected: item.rollout.id === this.selectedId,
        marked: this.marks.includes(item.rollout.id),
      });
    else fillGroupRow(row, item, { focused: this.focusedIndex === index, canAskMore: this.canAskMore });
  }
}
