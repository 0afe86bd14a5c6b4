/**
 * The trajectory of one rollout: a header (status, reward, tokens, duration) with the rollout's
 * reward controls, its rewards, and its spans as a tree in time order — LLM calls (messages, tools,
 * tool calls, response, model, tokens, latency), tool spans, errors — each step collapsible, its
 * body built only when opened, with the raw span JSON on demand and copy buttons. Spans arrive in
 * pages (a 2,000-span rollout shows its first steps at once) and live; steps are appended in place
 * while they arrive in time order. Keyboard: ↑/↓ move between steps, Enter/Space open one.
 */
import type { RayNode, Reward, Rollout, Span } from '../trainer-daemon/protocol/records';
import type { RolloutTransitions } from '../trainer-daemon/protocol/lightningrl';
import type { PolicyRef } from '../trainer-daemon/protocol/policy';
import { button, el, failureElement, rawJsonControls, statusIcon } from './dom';
import { formatDuration, rolloutDuration } from '../trainer-daemon/protocol/format';
import {
  formatTime,
  formatTokens,
  llmCallView,
  servedByText,
  rewardText,
  rolloutTitle,
  spanDepths,
  stepHeading,
  type MessageView,
} from '../trainer-daemon/protocol/ui/rolloutText';
import { isAutomatic } from '../trainer-daemon/protocol/rewardSources';
import { reviewVerdicts, type ReviewAction } from '../trainer-daemon/protocol/ui/rewardReview';
import { renderTrainingView } from './trainingView';

export interface TrajectoryActions {
  annotate(spanId: string | null, value: number, comment: string | null): void;
  copy(text: string): void;
  /** Asks for the rollout's Training view (transitions/forRollout). */
  loadTransitions(): void;
  reviewReward(rewardId: number, action: ReviewAction): void;
  /** The rollout in an editor tab (pinned), or beside the active editor. */
  openTab(beside: boolean): void;
  /** The tab that shows the rollout, brought to the front. */
  revealTab(): void;
  /** The steps are wanted here after all (a tab shows them): they are streamed from `afterSequence`. */
  loadSteps(afterSequence: number): void;
}

export class TrajectoryView {
  private rollout: Rollout | undefined;
  /** The policy that served the rollout's LLM calls (rollouts/get), once known. */
  private servedBy: PolicyRef | null = null;
  private node: RayNode | undefined;
  private spans: Span[] = [];
  private readonly depths = new Map<string, number>();
  private complete = false;
  private headerElement: HTMLElement = el('div');
  private readonly stepsElement = el('div', 'steps');
  private readonly stepsStatus = el('div', 'muted');
  private readonly rewardsElement = el('div', 'rewards');
  private readonly trainingElement = el('div', 'training');
  private readonly stepsSection = el('div', 'steps-section');
  private readonly tabNote = el('div', 'in-tab-note');
  /** Whether an editor tab shows this rollout's steps: the panel then shows its summary, not them again. */
  private inTab = false;

  constructor(
    readonly element: HTMLElement,
    private readonly actions: TrajectoryActions,
  ) {
    element.addEventListener('keydown', (event) => this.onKey(event));
  }

  get rolloutId(): string | undefined {
    return this.rollout?.id;
  }

  get lastSequence(): number {
    return this.spans.reduce((last, span) => Math.max(last, span.sequence), 0);
  }

  /** Shows a rollout at once (header, reward controls); its rewards and spans follow. */
  open(rollout: Rollout): void {
    this.rollout = rollout;
    this.servedBy = null;
    this.node = undefined;
    this.spans = [];
    this.depths.clear();
    this.complete = false;
    this.element.replaceChildren();
    this.element.dataset.rolloutId = rollout.id;
    this.headerElement = this.header();
    this.stepsElement.replaceChildren();
    this.stepsStatus.textContent = 'Loading steps…';
    this.rewardsElement.replaceChildren();
    this.trainingElement.replaceChildren();
    this.inTab = false;
    this.tabNote.hidden = true;
    this.stepsSection.hidden = false;
    this.stepsSection.replaceChildren(el('h3', undefined, 'Steps'), this.stepsElement, this.stepsStatus);
    this.element.append(this.headerElement, this.rewardsElement, this.tabNote, this.trainingElement, this.stepsSection);
  }

  /** Whether the steps are wanted here: false while an editor tab shows them. */
  get showsSteps(): boolean {
    return !this.inTab;
  }

  /**
   * An editor tab shows this rollout (or no longer does): the panel keeps its summary — the header, the reward
   * controls, the rewards — and says where the steps are, with Show Tab and Show Here.
   */
  setInTab(rolloutId: string, inTab: boolean): void {
    if (rolloutId !== this.rollout?.id || inTab === this.inTab) return;
    this.inTab = inTab;
    this.stepsSection.hidden = inTab;
    this.tabNote.hidden = !inTab;
    this.element.dataset.inTab = String(inTab);
    this.tabNote.replaceChildren(
      el(
        'span',
        'muted',
        `The ${this.rollout.spanCount} steps are in the rollout's editor tab (timeline, conversation).`,
      ),
      button('Show Tab', "Bring the rollout's editor tab to the front", () => this.actions.revealTab(), 'reveal-tab'),
      button('Show Here', 'Show the steps here in the panel too', () => this.showHere(), 'show-here'),
    );
  }

  private showHere(): void {
    if (!this.inTab) return;
    this.inTab = false;
    this.stepsSection.hidden = false;
    this.tabNote.hidden = true;
    this.element.dataset.inTab = 'false';
    this.actions.loadSteps(this.lastSequence);
  }

  /** The rollout changed (status, counters, reward): the header follows; what the user typed is kept. */
  updateRollout(rollout: Rollout): void {
    if (rollout.id !== this.rollout?.id) return;
    this.rollout = rollout;
    const header = this.header();
    const controls = this.headerElement.querySelector('.reward-controls');
    if (controls) header.querySelector('.reward-controls')!.replaceWith(controls);
    this.headerElement.replaceWith(header);
    this.headerElement = header;
  }

  clear(message: string): void {
    this.rollout = undefined;
    delete this.element.dataset.rolloutId;
    this.element.replaceChildren(el('div', 'empty', message));
  }

  /** A page of spans (or live ones). Appended in place while in time order, else the tree is redrawn. */
  appendSpans(spans: readonly Span[], complete: boolean): void {
    if (!this.rollout) return;
    const known = new Set(this.spans.map((span) => span.sequence));
    const fresh = spans
      .filter((span) => !known.has(span.sequence))
      .sort((a, b) => a.startMs - b.startMs || a.sequence - b.sequence);
    this.complete ||= complete;
    this.stepsStatus.textContent = this.complete
      ? this.spans.length + fresh.length === 0
        ? 'No spans yet.'
        : ''
      : `Loading steps… (${this.spans.length + fresh.length} so far)`;
    if (fresh.length === 0) return;
    const lastStart = this.spans.at(-1)?.startMs ?? -Infinity;
    const ids = new Set(this.spans.map((span) => span.spanId));
    // A span that starts earlier, or is the parent of one shown, changes the tree: redraw it.
    const shownParents = new Set(this.spans.map((shown) => shown.parentSpanId));
    const inOrder = fresh[0]!.startMs >= lastStart && !fresh.some((span) => shownParents.has(span.spanId));
    this.spans = [...this.spans, ...fresh].sort((a, b) => a.startMs - b.startMs || a.sequence - b.sequence);
    const fragment = document.createDocumentFragment();
    if (inOrder) {
      for (const span of fresh) {
        const parent =
          span.parentSpanId !== null && ids.has(span.parentSpanId) ? this.depths.get(span.parentSpanId) : undefined;
        this.depths.set(span.spanId, parent === undefined ? 0 : parent + 1);
        ids.add(span.spanId);
        fragment.append(this.step(span, this.depths.get(span.spanId)!));
      }
      this.stepsElement.append(fragment);
      return;
    }
    this.depths.clear();
    for (const [id, depth] of spanDepths(this.spans)) this.depths.set(id, depth);
    for (const span of this.spans) fragment.append(this.step(span, this.depths.get(span.spanId) ?? 0));
    this.stepsElement.replaceChildren(fragment);
  }

  /** Which policy answered the rollout's LLM calls, and the Ray node it ran on: shown in the header. */
  setServedBy(policy: PolicyRef | null, node?: RayNode): void {
    if (!this.rollout) return;
    this.servedBy = policy;
    this.node = node;
    this.updateRollout(this.rollout);
  }

  setRewards(rewards: readonly Reward[]): void {
    if (!this.rollout) return;
    this.renderRewards(rewards);
    // Rewards changed: an open Training view is out of date.
    if (this.trainingElement.childElementCount > 0) this.actions.loadTransitions();
  }

  setTransitions(view: RolloutTransitions): void {
    if (view.rolloutId !== this.rollout?.id) return;
    this.trainingElement.replaceChildren(el('h3', undefined, 'Training view'), renderTrainingView(view));
  }

  private header(): HTMLElement {
    const rollout = this.rollout!;
    const header = el('div', 'detail-header');
    const title = el('h2', `status-${rollout.status}`);
    title.append(statusIcon(rollout.status), el('span', 'title', rolloutTitle(rollout)));
    const facts = el(
      'div',
      'facts',
      `${rollout.status} · ${rollout.mode} · ${rollout.llmCalls} LLM calls · ${formatTokens(rollout.promptTokens)} in / ${formatTokens(rollout.completionTokens)} out tokens · ${formatDuration(rolloutDuration(rollout))} · ${formatTime(rollout.createdAt)} · reward ${rewardText(rollout.reward)}`,
    );
    const id = el('div', 'facts');
    id.append(
      el('code', undefined, rollout.id),
      button('Copy id', 'Copy the rollout id', () => this.actions.copy(rollout.id)),
      button(
        'Training view',
        'Show what training would make of this rollout',
        () => this.actions.loadTransitions(),
        'show-training',
      ),
    );
    id.append(
      button(
        'Open in Editor',
        'Open this rollout in an editor tab (timeline, conversation)',
        () => this.actions.openTab(false),
        'open-tab',
      ),
      button(
        'Open to the Side',
        'Open this rollout in an editor tab beside the active one',
        () => this.actions.openTab(true),
        'open-beside',
      ),
    );
    header.append(title, facts, id);
    if (this.servedBy) header.append(el('div', 'facts served-by', servedByText(this.servedBy)));
    if (this.node) header.append(el('div', 'facts ran-on', `ran on Ray node ${this.node.ip} (${this.node.host})`));
    if (rollout.error) header.append(failureElement(rollout.error));
    header.append(this.rewardControls(null));
    return header;
  }

  /** Good (1) / Bad (0) / number + optional comment, for the rollout (spanId null) or one step. */
  private rewardControls(spanId: string | null): HTMLElement {
    const box = el('div', spanId ? 'reward-controls step-reward' : 'reward-controls');
    const comment = document.createElement('vscode-textfield') as HTMLElement & { value: string };
    comment.setAttribute('placeholder', 'comment (optional)');
    comment.setAttribute('aria-label', spanId ? 'Step reward comment' : 'Reward comment');
    comment.className = 'comment';
    const number = document.createElement('vscode-textfield') as HTMLElement & { value: string };
    number.setAttribute('placeholder', 'value');
    number.setAttribute('aria-label', spanId ? 'Step reward value' : 'Reward value');
    number.className = 'number';
    const send = (value: number): void => this.actions.annotate(spanId, value, comment.value.trim() || null);
    const target = spanId ? 'this step' : 'the rollout';
    box.append(
      // With words too: an editor without an emoji font still says what each does.
      button('$(thumbsup) Good', `Reward ${target} 1 (good)`, () => send(1), 'thumb-up'),
      button('$(thumbsdown) Bad', `Reward ${target} 0 (bad)`, () => send(0), 'thumb-down'),
      number,
      button(
        'Set',
        `Reward ${target} with the number typed`,
        () => {
          const value = Number(number.value);
          if (number.value.trim() !== '' && Number.isFinite(value)) send(value);
          else number.setAttribute('invalid', '');
        },
        'set-number',
      ),
      comment,
    );
    number.addEventListener(
      'keydown',
      (event) => event.key === 'Enter' && box.querySelector<HTMLElement>('.set-number')?.click(),
    );
    return box;
  }

  /**
   * Every reward with its source and reason; automatic ones can be accepted, corrected or rejected
   * (trainer-daemon/protocol/ui/rewardReview.ts).
   */
  private renderRewards(rewards: readonly Reward[]): void {
    this.rewardsElement.replaceChildren();
    if (rewards.length === 0) return void this.rewardsElement.append(el('div', 'muted', 'No rewards yet.'));
    this.rewardsElement.append(el('h3', undefined, `Rewards (${rewards.length})`));
    const verdicts = reviewVerdicts(rewards);
    for (const reward of [...rewards].reverse()) {
      const row = el('div', `reward-row source-${reward.source}`);
      row.dataset.rewardId = String(reward.id);
      row.append(
        el('strong', undefined, rewardText(reward.value)),
        el(
          'span',
          'muted',
          ` ${reward.name} · ${reward.source}${reward.author ? ` · ${reward.author}` : ''}${reward.spanId ? ` · step ${reward.spanId}` : ''} · ${formatTime(reward.createdAt)}`,
        ),
      );
      if (reward.reason) row.append(el('div', 'reward-reason', reward.reason));
      if (reward.comment) row.append(el('div', 'comment-text', reward.comment));
      if (isAutomatic(reward)) {
        const verdict = verdicts.get(reward.id);
        const review = el('div', 'reward-review');
        if (verdict)
          review.append(
            el(
              'span',
              `verdict verdict-${verdict.action}`,
              `${verdict.action === 'accept' ? 'accepted' : verdict.action === 'correct' ? `corrected to ${rewardText(verdict.by.value)}` : 'rejected'}${verdict.by.author ? ` by ${verdict.by.author}` : ''}`,
            ),
          );
        review.append(
          button(
            'Accept',
            `Accept this ${reward.source} reward (a human ${reward.value})`,
            () => this.actions.reviewReward(reward.id, 'accept'),
            'accept-reward',
          ),
          button(
            'Correct…',
            `Correct this ${reward.source} reward with a value of yours`,
            () => this.actions.reviewReward(reward.id, 'correct'),
            'correct-reward',
          ),
          button(
            'Reject',
            `Reject this ${reward.source} reward (a human 0)`,
            () => this.actions.reviewReward(reward.id, 'reject'),
            'reject-reward',
          ),
        );
        row.append(review);
      }
      this.rewardsElement.append(row);
    }
  }

  private step(span: Span, depth: number): HTMLElement {
    const details = el('details', `step kind-${span.category}${span.statusCode === 'error' ? ' has-error' : ''}`);
    details.dataset.spanId = span.spanId;
    details.style.marginLeft = `${Math.min(depth, 8) * 12}px`;
    const summary = el('summary');
    const heading = stepHeading(span, this.spans);
    summary.append(
      el('span', 'step-kind', heading.kind),
      el('span', 'step-name', heading.name),
      el('span', 'muted', heading.meta),
    );
    if (heading.error !== null) summary.append(el('span', 'error', heading.error));
    // Not a whole answer (so not trained on), and/or a retry: a short badge.
    if (heading.badge !== null) summary.append(el('span', 'outcome-badge', ` ${heading.badge}`));
    details.append(summary);
    details.addEventListener('toggle', () => {
      if (details.open && details.childElementCount === 1) details.append(this.stepBody(span));
    });
    return details;
  }

  private stepBody(span: Span): HTMLElement {
    const body = el('div', 'step-body');
    if (span.category === 'llm') {
      const call = llmCallView(span);
      body.append(
        el(
          'div',
          'facts',
          `${call.model} · ${call.promptTokens ?? '?'} prompt + ${call.completionTokens ?? '?'} completion tokens · ${formatDuration(call.latencyMs)}`,
        ),
      );
      if (call.error) body.append(el('div', 'error', call.error));
      if (call.tools.length) body.append(el('div', 'tools', `Tools: ${call.tools.join(', ')}`));
      body.append(el('h4', undefined, 'Messages'));
      for (const message of call.messages) body.append(this.message(message));
      body.append(el('h4', undefined, 'Response'));
      body.append(
        call.response ? this.message(call.response, 'response') : el('div', 'muted', 'No response recorded.'),
      );
      body.append(this.rewardControls(span.spanId));
    } else {
      const attributes = Object.entries(span.attributes).slice(0, 50);
      const table = el('div', 'attributes');
      for (const [key, value] of attributes)
        table.append(
          el('div', 'attr-key', key),
          el('div', 'attr-value', typeof value === 'string' ? value : JSON.stringify(value)),
        );
      body.append(table);
    }
    body.append(...rawJsonControls(span, (text) => this.actions.copy(text)));
    return body;
  }

  private message(message: MessageView, className = 'message'): HTMLElement {
    const box = el('div', `${className} role-${message.role}`);
    const head = el('div', 'message-head');
    head.append(
      el('span', 'role', message.role),
      button('Copy', `Copy this ${message.role} message`, () =>
        this.actions.copy(message.content || JSON.stringify(message.toolCalls)),
      ),
    );
    box.append(head);
    if (message.thinking) {
      // Thinking stays collapsed: it is long and not what the agent acted on.
      const thinking = el('details', 'thinking');
      thinking.append(el('summary', 'muted', 'thinking'), el('div', 'content', message.thinking));
      box.append(thinking);
    }
    if (message.content) box.append(el('div', 'content', message.content));
    for (const call of message.toolCalls) box.append(el('div', 'tool-call', `→ ${call.name}(${call.arguments})`));
    return box;
  }

  private onKey(event: KeyboardEvent): void {
    if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
    const summaries = [...this.stepsElement.querySelectorAll<HTMLElement>(':scope > details > summary')];
    const current = summaries.indexOf(document.activeElement as HTMLElement);
    if (
      current === -1 &&
      !(document.activeElement instanceof HTMLElement && this.stepsElement.contains(document.activeElement))
    )
      return;
    event.preventDefault();
    summaries[Math.min(summaries.length - 1, Math.max(0, current + (event.key === 'ArrowDown' ? 1 : -1)))]?.focus();
  }
}
