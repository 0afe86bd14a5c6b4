/**
 * Two rollouts side by side: their totals (status, reward, steps, tokens, duration) in two
 * columns, then their steps aligned (compareLogic.ts: alike steps paired, a gap where one has a
 * step the other has not), each pair with both steps' tokens, latency and step rewards; opening a
 * pair shows its prompts and answers diffed word by word (removed on the left, added on the right).
 * The first screen comes first: the steps that have arrived are aligned and shown while the rest load
 * (aligned again when both rollouts are complete), and the pairs past a screenful are built in later frames.
 */
import type { Reward, Rollout, Span } from '../../trainer-daemon/protocol/records';
import { button, codicon, el, statusIcon } from '../dom';
import { formatTokens, rewardText, rolloutTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import { formatDuration, rolloutDuration } from '../../trainer-daemon/protocol/format';
import {
  alignSteps,
  compareSteps,
  compareTotals,
  wordDiff,
  type AlignedPair,
  type CompareStep,
  type DiffPart,
} from './compareLogic';

/**
 * Pairs built at once: a screenful (a pair's row is ~50 px), since the first frame lays out all it is given
 * (40 pairs took 25–40 ms of layout in the e2e); the rest follow, this many per frame.
 */
const FIRST_PAIRS = 20;
const PAIRS_PER_FRAME = 80;

export interface CompareTabActions {
  loadSpans(rolloutId: string, afterSequence: number): void;
  openRollout(rolloutId: string): void;
  /** Both rollouts' steps are painted aligned. */
  painted(): void;
}

interface Side {
  readonly id: string;
  rollout?: Rollout;
  spans: Map<number, Span>;
  complete: boolean;
  rewards: Reward[];
}

export class CompareTab {
  readonly element = el('div', 'compare-tab');
  private readonly sides: [Side, Side];
  private readonly summary = el('div', 'compare-summary');
  private readonly progress = el('div', 'muted compare-progress');
  private readonly steps = el('div', 'compare-steps');
  private frame = 0;
  /** Bumped by each render: the frames still building an older render's pairs stop. */
  private renders = 0;
  private readonly open = new Set<number>();

  constructor(
    left: string,
    right: string,
    private readonly actions: CompareTabActions,
  ) {
    const side = (id: string): Side => ({ id, spans: new Map(), complete: false, rewards: [] });
    this.sides = [side(left), side(right)];
    Object.assign(this.element.dataset, { left, right });
    this.element.append(el('h2', undefined, 'Compare rollouts'), this.summary, this.progress, this.steps);
    this.progress.textContent = 'Loading both rollouts…';
  }

  get rolloutIds(): string[] {
    return this.sides.map((side) => side.id);
  }

  private side(id: string): Side | undefined {
    return this.sides.find((side) => side.id === id);
  }

  setRollout(rollout: Rollout): void {
    const side = this.side(rollout.id);
    if (!side) return;
    side.rollout = rollout;
    this.schedule();
  }

  lastSequence(id: string): number {
    let last = 0;
    for (const sequence of this.side(id)?.spans.keys() ?? []) last = Math.max(last, sequence);
    return last;
  }

  addSpans(id: string, spans: readonly Span[], complete: boolean): void {
    const side = this.side(id);
    if (!side) return;
    for (const span of spans) side.spans.set(span.sequence, span);
    side.complete ||= complete;
    this.schedule();
  }

  spansAvailable(id: string, toSequence: number): void {
    if (this.side(id) && toSequence > this.lastSequence(id)) this.actions.loadSpans(id, this.lastSequence(id));
  }

  setRewards(id: string, rewards: readonly Reward[]): void {
    const side = this.side(id);
    if (!side) return;
    side.rewards = [...rewards];
    this.schedule();
  }

  private schedule(): void {
    if (!this.frame)
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render(true);
      });
  }

  /**
   * Renders what came so far now, not in the next animation frame: the page's first messages (its first
   * screen, in the HTML) are drawn before the new page's first frame, which can come tens of ms later.
   */
  flush(): void {
    if (!this.frame) return;
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.render(false);
  }

  /** `inFrame`: called in an animation frame (its layout and paint follow at once). */
  private render(inFrame: boolean): void {
    const started = performance.now();
    const [left, right] = this.sides;
    const leftSteps = compareSteps([...left.spans.values()]);
    const rightSteps = compareSteps([...right.spans.values()]);
    this.renderSummary(leftSteps, rightSteps);
    const complete = left.complete && right.complete;
    this.progress.textContent = complete
      ? ''
      : `Loading steps… (${left.spans.size} and ${right.spans.size} spans so far)`;
    if (!complete && (leftSteps.length === 0 || rightSteps.length === 0)) return;
    const pairs = alignSteps(leftSteps, rightSteps);
    // The first pair that differs opens by itself (once both are whole): where the two rollouts part ways.
    if (complete && this.open.size === 0) {
      const firstDifferent = pairs.findIndex(
        (pair) =>
          pair.left === null ||
          pair.right === null ||
          leftSteps[pair.left]!.answer !== rightSteps[pair.right]!.answer ||
          leftSteps[pair.left]!.prompt !== rightSteps[pair.right]!.prompt,
      );
      if (firstDifferent >= 0) this.open.add(firstDifferent);
    }
    const render = ++this.renders;
    const build = (from: number, to: number): DocumentFragment => {
      const fragment = document.createDocumentFragment();
      for (let index = from; index < Math.min(to, pairs.length); index += 1)
        fragment.append(this.pairElement(pairs[index]!, index, leftSteps, rightSteps));
      return fragment;
    };
    this.steps.replaceChildren(build(0, FIRST_PAIRS));
    const more = (from: number): void => {
      if (render !== this.renders || from >= pairs.length) return;
      this.steps.append(build(from, from + PAIRS_PER_FRAME));
      requestAnimationFrame(() => more(from + PAIRS_PER_FRAME));
    };
    requestAnimationFrame(() => more(FIRST_PAIRS));
    // On the page's clock (read by the e2e): the first aligned pairs shown, and all of them once both rollouts are
    // whole.
    const marks = this.element.dataset;
    if (!marks.paintedAt) {
      marks.paintedAt = String(Date.now());
      marks.firstRenderMs = (performance.now() - started).toFixed(1);
      // A task queued from an animation frame runs once that frame's layout and paint are done.
      const onScreen = (): void => void setTimeout(() => (marks.firstFrameAt = String(Date.now())));
      if (inFrame) onScreen();
      else requestAnimationFrame(onScreen);
      this.actions.painted();
    }
    if (complete) {
      marks.pairs = String(pairs.length);
      if (!marks.completeAt) {
        marks.completeAt = String(Date.now());
        marks.completeRenderMs = (performance.now() - started).toFixed(1);
      }
    }
  }

  private renderSummary(leftSteps: readonly CompareStep[], rightSteps: readonly CompareStep[]): void {
    const table = el('div', 'compare-grid compare-totals');
    table.setAttribute('role', 'table');
    const totals = [compareTotals(leftSteps), compareTotals(rightSteps)];
    const cells: Array<[string, (side: Side, index: number) => string | HTMLElement]> = [
      [
        '',
        (side) => {
          const head = el('div', 'compare-title');
          head.append(
            side.rollout ? statusIcon(side.rollout.status) : codicon('loading'),
            el('span', undefined, side.rollout ? rolloutTitle(side.rollout) : side.id),
            button(
              'Open',
              `Open rollout ${side.id} in its own tab`,
              () => this.actions.openRollout(side.id),
              'open-side',
            ),
          );
          return head;
        },
      ],
      ['status', (side) => side.rollout?.status ?? '…'],
      ['reward', (side) => (side.rollout ? rewardText(side.rollout.reward) : '…')],
      ['steps', (_, index) => String(totals[index]!.steps)],
      [
        'tokens',
        (side) =>
          side.rollout
            ? `${formatTokens(side.rollout.promptTokens)} in / ${formatTokens(side.rollout.completionTokens)} out`
            : '…',
      ],
      ['duration', (side) => (side.rollout ? formatDuration(rolloutDuration(side.rollout)) : '…')],
      ['LLM time', (_, index) => formatDuration(totals[index]!.latencyMs)],
    ];
    for (const [label, value] of cells) {
      table.append(el('div', 'compare-label', label));
      this.sides.forEach((side, index) => {
        const cell = el('div', 'compare-cell');
        const content = value(side, index);
        if (typeof content === 'string') cell.textContent = content;
        else cell.append(content);
        table.append(cell);
      });
    }
    this.summary.replaceChildren(table);
  }

  private stepReward(side: Side, spanId: string): string {
    const rewards = side.rewards.filter((reward) => reward.spanId === spanId && reward.name === 'reward');
    return rewards.length
      ? ` · reward ${rewardText(rewards.sort((a, b) => a.createdAt - b.createdAt).at(-1)!.value)}`
      : '';
  }

  private pairElement(
    pair: AlignedPair,
    index: number,
    leftSteps: readonly CompareStep[],
    rightSteps: readonly CompareStep[],
  ): HTMLElement {
    const details = el('details', `compare-pair${pair.left === null || pair.right === null ? ' gap' : ''}`);
    details.dataset.index = String(index);
    const summary = el('summary', 'compare-grid');
    const side = (step: CompareStep | undefined, which: Side): HTMLElement => {
      if (!step) return el('div', 'compare-cell muted', '— no matching step —');
      const cell = el(
        'div',
        `compare-cell${step.span.statusCode === 'error' ? ' error' : ''}`,
        `${step.span.name} · ${formatTokens(step.tokens)} tok · ${formatDuration(step.latencyMs)}${this.stepReward(which, step.span.spanId)}`,
      );
      cell.append(
        el('div', 'compare-snippet muted', step.prompt.length > 120 ? `${step.prompt.slice(0, 119)}…` : step.prompt),
      );
      return cell;
    };
    const a = pair.left === null ? undefined : leftSteps[pair.left];
    const b = pair.right === null ? undefined : rightSteps[pair.right];
    const same = a && b && a.prompt === b.prompt && a.answer === b.answer;
    summary.append(
      el(
        'div',
        'compare-label',
        `${index + 1}${a && b ? (same ? ' =' : ` ≈${Math.round(pair.similarity * 100)}%`) : ''}`,
      ),
      side(a, this.sides[0]),
      side(b, this.sides[1]),
    );
    details.append(summary);
    const fill = (): void => {
      if (details.childElementCount > 1) return;
      for (const [label, before, after] of [
        ['Prompt', a?.prompt ?? '', b?.prompt ?? ''],
        ['Answer', a?.answer ?? '', b?.answer ?? ''],
      ] as const) {
        const parts = wordDiff(before, after);
        const row = el('div', 'compare-grid compare-diff');
        row.append(el('div', 'compare-label', label), diffElement(parts, 'removed'), diffElement(parts, 'added'));
        details.append(row);
      }
    };
    details.addEventListener('toggle', () => {
      if (details.open) this.open.add(index);
      else this.open.delete(index);
      fill();
    });
    if (this.open.has(index)) {
      details.open = true;
      fill();
    }
    return details;
  }
}

/** One side of a diff: the common words and this side's own (removed on the left, added on the right), marked. */
function diffElement(parts: readonly DiffPart[], own: 'removed' | 'added'): HTMLElement {
  const box = el('div', 'compare-cell diff-text');
  for (const part of parts) {
    if (part.op === 'same') box.append(document.createTextNode(part.text));
    else if (part.op === own) box.append(el(own === 'added' ? 'ins' : 'del', `diff-${own}`, part.text));
  }
  return box;
}
