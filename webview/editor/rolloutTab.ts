/**
 * A rollout in an editor tab: its header (status, tokens, duration, reward) with the rollout's
 * reward controls, the waterfall timeline of its spans, and the selected span below — an LLM call
 * as a conversation, any other span as its attributes — with that step's rewards and an inline
 * annotation form. Live: spans and rewards arrive while the rollout runs. Keys (anywhere but a
 * text field): j / k next / previous LLM call, ↑ / ↓ any span, 1 / 0 or a digit rate the selected
 * step (Shift: the rollout), c comment on the step, + / − zoom, ← / → pan, f fit.
 */
import type { RayNode, Reward, Rollout, Span } from '../../trainer-daemon/protocol/records';
import { button, el, failureElement, rawJsonControls, statusIcon } from '../dom';
import { formatTime, formatTokens, rewardText, rolloutTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import { formatDuration, rolloutDuration } from '../../trainer-daemon/protocol/format';
import { conversationOf } from './conversation';
import { isSlim } from '../../trainer-daemon/protocol/slimSpan';
import { detailHeading } from './detailHeading';
import { conversationElement } from './conversationView';
import { isRootSpan, layoutTimeline, nextStep, rolloutRootSpan, type TimelineLayout } from './timelineLayout';
import { describeRow, TimelineView } from './timelineView';

export interface RolloutTabActions {
  loadSpans(rolloutId: string, afterSequence: number): void;
  /** The whole span (the tab has it slimmed). */
  loadSpan(rolloutId: string, sequence: number): void;
  annotate(rolloutId: string, spanId: string | null, value: number, comment: string | null): void;
  copy(text: string): void;
  compareWith(rolloutId: string): void;
  selectionChanged(spanId: string | null): void;
  /** The timeline's first rows are painted. */
  painted(): void;
  /** The waterfall was dragged to a height (px), or fitted to its rows again (undefined). */
  timelineResized(height: number | undefined): void;
}

type TextField = HTMLElement & { value: string };

function textField(className: string, placeholder: string, label: string): TextField {
  const field = document.createElement('vscode-textfield') as TextField;
  field.className = className;
  field.setAttribute('placeholder', placeholder);
  field.setAttribute('aria-label', label);
  return field;
}

export class RolloutTab {
  readonly element = el('div', 'rollout-tab');
  private rollout: Rollout | undefined;
  private node: RayNode | undefined;
  private spans = new Map<number, Span>();
  private complete = false;
  private rewards: Reward[] = [];
  private layout: TimelineLayout = layoutTimeline([]);
  private selected = -1;
  private readonly header = el('div', 'tab-header');
  private readonly rewardsElement = el('div', 'tab-rewards');
  private readonly status = el('div', 'muted timeline-status');
  private readonly timeline: TimelineView;
  private readonly detail = el('div', 'span-detail');
  private readonly live = el('div', 'visually-hidden');
  private pendingSelection: string | null;
  private layoutFrame = 0;
  private clock: ReturnType<typeof setInterval> | undefined;
  /** Ratings sent from this tab, by step: what a comment alone keeps until the store's rows arrive. */
  private readonly rated = new Map<string, { value: number; at: number }>();

  constructor(
    readonly rolloutId: string,
    selectedSpanId: string | null,
    private readonly actions: RolloutTabActions,
    timelineHeight?: number,
  ) {
    this.timeline = new TimelineView(
      {
        select: (index) => this.select(index),
        painted: () => this.actions.painted(),
        resized: (height) => this.actions.timelineResized(height),
      },
      timelineHeight,
    );
    this.pendingSelection = selectedSpanId;
    this.element.dataset.rolloutId = rolloutId;
    this.live.setAttribute('aria-live', 'polite');
    const top = el('div', 'rollout-top');
    top.append(this.header, this.rewardsElement, this.status, this.timeline.element);
    this.element.append(top, this.detail, this.live);
    this.header.append(el('h2', undefined, `Rollout ${rolloutId}`));
    this.status.textContent = 'Loading spans…';
    this.detail.append(el('div', 'empty', 'Select a span in the timeline (j / k move between LLM calls).'));
  }

  /**
   * The rollout changed; `node`, when known, is the Ray node its last attempt ran on (kept across live updates, which
   * lack it).
   */
  setRollout(rollout: Rollout, node?: RayNode): void {
    if (rollout.id !== this.rolloutId) return;
    this.rollout = rollout;
    if (node) this.node = node;
    this.renderHeader();
    // The root row spans the rollout: its start and end come with it.
    if (!this.layoutFrame) this.layoutFrame = requestAnimationFrame(() => this.relayout());
    // While it runs, its open spans grow with the clock: laid out again every second.
    const running = rollout.status === 'running' || rollout.status === 'queued';
    if (running && this.clock === undefined)
      this.clock = setInterval(
        () => !this.layoutFrame && (this.layoutFrame = requestAnimationFrame(() => this.relayout())),
        1_000,
      );
    if (!running && this.clock !== undefined) {
      clearInterval(this.clock);
      this.clock = undefined;
    }
  }

  get lastSequence(): number {
    let last = 0;
    for (const sequence of this.spans.keys()) last = Math.max(last, sequence);
    return last;
  }

  addSpans(spans: readonly Span[], complete: boolean): void {
    for (const span of spans) this.spans.set(span.sequence, span);
    this.complete ||= complete;
    this.status.textContent = this.complete
      ? this.spans.size === 0
        ? 'No spans yet.'
        : ''
      : `Loading spans… (${this.spans.size} so far)`;
    // Pages arrive back to back: lay out once per frame.
    if (!this.layoutFrame) this.layoutFrame = requestAnimationFrame(() => this.relayout());
  }

  /** A whole span arrived: it replaces the slimmed one, and its conversation is shown if it is selected. */
  addWholeSpan(span: Span): void {
    if (span.rolloutId !== this.rolloutId) return;
    this.spans.set(span.sequence, span);
    const index = this.layout.indexOf.get(span.spanId);
    if (index !== undefined) {
      this.layout = { ...this.layout, rows: this.layout.rows.map((row, i) => (i === index ? { ...row, span } : row)) };
      if (index === this.selected) this.renderDetail(span);
    }
  }

  spansAvailable(toSequence: number): void {
    if (toSequence > this.lastSequence) this.actions.loadSpans(this.rolloutId, this.lastSequence);
  }

  private relayout(): void {
    this.layoutFrame = 0;
    const selectedId = this.layout.rows[this.selected]?.span.spanId ?? this.pendingSelection;
    this.layout = layoutTimeline(
      [...this.spans.values()],
      Date.now(),
      this.rollout ? rolloutRootSpan(this.rollout, rolloutTitle(this.rollout)) : undefined,
    );
    this.timeline.setLayout(this.layout, this.complete);
    this.element.dataset.spans = String(this.spans.size);
    const index = selectedId ? this.layout.indexOf.get(selectedId) : undefined;
    if (index !== undefined) {
      this.pendingSelection = null;
      if (index !== this.selected || this.detail.dataset.spanId !== selectedId) this.select(index);
      else this.selected = index;
    } else if (this.selected === -1 && this.spans.size > 0 && !this.pendingSelection) {
      // The first LLM call (its conversation is what one opens a rollout for), else the first row.
      const first = nextStep(this.layout, -1, 1);
      this.select(first === -1 ? 0 : first);
    }
  }

  setRewards(rewards: readonly Reward[]): void {
    this.rewards = [...rewards];
    const latest = new Map<string, number>();
    for (const reward of [...rewards].sort((a, b) => a.createdAt - b.createdAt || a.id - b.id))
      if (reward.spanId && reward.name === 'reward') latest.set(reward.spanId, reward.value);
    this.timeline.setStepRewards(latest);
    this.renderRewards();
    const spanId = this.detail.dataset.spanId;
    if (spanId) this.renderStepRewards(spanId);
  }

  private renderHeader(): void {
    const rollout = this.rollout!;
    const title = el('h2', `status-${rollout.status}`);
    title.append(statusIcon(rollout.status), el('span', 'title', rolloutTitle(rollout)));
    const facts = el(
      'div',
      'facts',
      `${rollout.status} · ${rollout.mode} · ${rollout.spanCount} spans · ${rollout.llmCalls} LLM calls · ${formatTokens(rollout.promptTokens)} in / ${formatTokens(rollout.completionTokens)} out tokens · ${formatDuration(rolloutDuration(rollout))} · ${formatTime(rollout.createdAt)}${this.node ? ` · on Ray node ${this.node.ip} (${this.node.host})` : ''}`,
    );
    const actions = el('div', 'facts');
    actions.append(
      el('strong', 'rollout-reward', `reward ${rewardText(rollout.reward)}`),
      button('$(thumbsup) Good', 'Reward the rollout 1 (good) — Shift+1', () => this.rate(null, 1), 'rollout-good'),
      button('$(thumbsdown) Bad', 'Reward the rollout 0 (bad) — Shift+0', () => this.rate(null, 0), 'rollout-bad'),
      button(
        'Compare with…',
        'Compare this rollout with another one',
        () => this.actions.compareWith(rollout.id),
        'compare-with',
      ),
      button('Copy id', 'Copy the rollout id', () => this.actions.copy(rollout.id)),
      el('code', 'muted', rollout.id),
    );
    this.header.replaceChildren(title, facts, actions);
    if (rollout.error) this.header.append(failureElement(rollout.error));
  }

  private renderRewards(): void {
    const rollout = this.rewards.filter((reward) => reward.spanId === null);
    const steps = this.rewards.length - rollout.length;
    this.rewardsElement.textContent =
      this.rewards.length === 0
        ? 'No rewards yet.'
        : `${rollout.length} rollout reward${rollout.length === 1 ? '' : 's'}, ${steps} step reward${steps === 1 ? '' : 's'}${rollout.length ? ` · latest: ${rewardText(rollout.at(-1)!.value)} (${rollout.at(-1)!.source})` : ''}`;
  }

  private select(index: number): void {
    const row = this.layout.rows[index];
    if (!row) return;
    this.selected = index;
    this.timeline.select(index);
    this.live.textContent = `${index + 1} of ${this.layout.rows.length}: ${describeRow(row)}`;
    this.actions.selectionChanged(row.span.spanId);
    this.renderDetail(row.span);
  }

  private renderDetail(span: Span): void {
    this.detail.replaceChildren();
    this.detail.dataset.spanId = span.spanId;
    const head = el('div', 'detail-head');
    const heading = detailHeading(span, this.spans.values());
    head.append(
      el('span', `step-kind kind-${span.category}`, heading.kind),
      el('strong', 'step-name', heading.name),
      el('span', 'muted', heading.meta),
    );
    if (heading.error !== null) head.append(el('span', 'error', heading.error));
    // Not a whole answer (so not trained on), and/or a retry: a short badge.
    if (heading.badge !== null) head.append(el('span', 'outcome-badge', ` ${heading.badge}`));
    this.detail.append(head, this.annotationForm(span), el('div', 'step-rewards'));
    this.renderStepRewards(span.spanId);
    if (span.category === 'llm' && isSlim(span)) {
      this.detail.append(el('div', 'muted loading-conversation', 'Loading the conversation…'));
      this.actions.loadSpan(this.rolloutId, span.sequence);
    } else if (span.category === 'llm')
      this.detail.append(conversationElement(conversationOf(span), (text) => this.actions.copy(text)));
    else {
      const table = el('div', 'attributes');
      for (const [key, value] of Object.entries(span.attributes).slice(0, 200))
        table.append(
          el('div', 'attr-key', key),
          el('div', 'attr-value', typeof value === 'string' ? value : JSON.stringify(value)),
        );
      this.detail.append(table, ...rawJsonControls(span, (text) => this.actions.copy(text)));
    }
  }

  private annotationForm(span: Span): HTMLElement {
    const form = el('div', 'reward-controls step-annotation');
    const value = textField('number', 'value', 'Step reward value');
    const comment = textField('comment', 'comment (c)', 'Step reward comment');
    const send = (): void => {
      // A comment alone keeps the step's latest value (a reward row always has one).
      const typed = value.value.trim() || String(this.latestStepValue(span.spanId) ?? '');
      const number = Number(typed);
      if (typed === '' || !Number.isFinite(number)) return void value.setAttribute('invalid', '');
      this.rate(span.spanId, number, comment.value.trim() || null);
      comment.value = '';
    };
    form.append(
      button(
        '$(thumbsup) 1',
        'Reward this step 1 (key 1)',
        () => this.rate(span.spanId, 1, comment.value.trim() || null),
        'step-good',
      ),
      button(
        '$(thumbsdown) 0',
        'Reward this step 0 (key 0)',
        () => this.rate(span.spanId, 0, comment.value.trim() || null),
        'step-bad',
      ),
      value,
      comment,
      button('Save', 'Save the step reward with the value and comment typed', send, 'save-step'),
    );
    for (const field of [value, comment])
      field.addEventListener('keydown', (event) => {
        if (event.key === 'Enter') send();
        if (event.key === 'Escape') this.timeline.focus();
      });
    return form;
  }

  private latestStepValue(spanId: string): number | undefined {
    const stored = this.rewards
      .filter((reward) => reward.spanId === spanId && reward.name === 'reward')
      .sort((a, b) => a.createdAt - b.createdAt || a.id - b.id)
      .at(-1);
    // A rating given here a moment ago counts before its row comes back from the store.
    const rated = this.rated.get(spanId);
    return rated !== undefined && (stored === undefined || rated.at > stored.createdAt) ? rated.value : stored?.value;
  }

  private renderStepRewards(spanId: string): void {
    const box = this.detail.querySelector('.step-rewards');
    if (!box) return;
    const rewards = this.rewards.filter((reward) => reward.spanId === spanId);
    box.replaceChildren(
      ...rewards.reverse().map((reward) => {
        const row = el('div', `reward-row source-${reward.source}`);
        row.append(
          el('strong', undefined, rewardText(reward.value)),
          el(
            'span',
            'muted',
            ` ${reward.name} · ${reward.source}${reward.author ? ` · ${reward.author}` : ''} · ${formatTime(reward.createdAt)}`,
          ),
        );
        if (reward.comment) row.append(el('div', 'comment-text', reward.comment));
        return row;
      }),
    );
  }

  private rate(step: string | null, value: number, comment: string | null = null): void {
    // The root row is the rollout: its rating is the rollout's.
    const spanId = step !== null && isRootSpan({ spanId: step }) ? null : step;
    if (spanId) this.rated.set(spanId, { value, at: Date.now() });
    this.actions.annotate(this.rolloutId, spanId, value, comment);
    this.live.textContent = `Rated ${spanId ? 'the step' : 'the rollout'} ${value}${comment ? ' with a comment' : ''}.`;
  }

  /** The tab's keys; false when the key is not one of them (typing in a field never is). */
  onKey(event: KeyboardEvent): boolean {
    const target = event.target as HTMLElement | null;
    if (
      target &&
      (target.tagName === 'VSCODE-TEXTFIELD' ||
        target.tagName === 'INPUT' ||
        target.tagName === 'TEXTAREA' ||
        target.isContentEditable)
    )
      return false;
    if (event.ctrlKey || event.metaKey || event.altKey) return false;
    const digit = /^(?:Digit|Numpad)(\d)$/.exec(event.code)?.[1];
    const span = this.layout.rows[this.selected]?.span;
    if (digit !== undefined) {
      if (event.shiftKey) this.rate(null, Number(digit));
      else if (span) this.rate(span.spanId, Number(digit));
      return true;
    }
    switch (event.key) {
      case 'j':
        this.select(nextStep(this.layout, this.selected, 1));
        return true;
      case 'k':
        this.select(nextStep(this.layout, Math.max(0, this.selected === -1 ? 0 : this.selected), -1));
        return true;
      case 'ArrowDown':
        this.select(Math.min(this.layout.rows.length - 1, this.selected + 1));
        return true;
      case 'ArrowUp':
        this.select(Math.max(0, this.selected - 1));
        return true;
      case 'c':
        this.detail.querySelector<HTMLElement>('.step-annotation .comment')?.focus();
        return true;
      case '+':
      case '=':
        this.timeline.zoom(0.5);
        return true;
      case '-':
        this.timeline.zoom(2);
        return true;
      case 'ArrowLeft':
        this.timeline.pan(-0.25);
        return true;
      case 'ArrowRight':
        this.timeline.pan(0.25);
        return true;
      case 'f':
        this.timeline.fit();
        return true;
      default:
        return false;
    }
  }

  /** The e2e's read-out of the timeline's draw times. */
  get timelineView(): TimelineView {
    return this.timeline;
  }
}
