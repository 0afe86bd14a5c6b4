/**
 * The rollout list's rows (rolloutList.ts): what each row shows, as elements the list keeps and fills in place. A
 * rollout's row: its status, title, reward, failure reason and facts; a run's or a batch's row: its title, counts and
 * time; the "more runs" row. Which row shows which item across changes is its key (itemKey).
 */
import type { Rollout } from '../trainer-daemon/protocol/records';
import type { RolloutBatchGroup, RolloutRunGroup } from '../trainer-daemon/protocol/rpc';
import { formatDuration, rolloutDuration } from '../trainer-daemon/protocol/format';
import { failureHeadline } from '../trainer-daemon/protocol/failureText';
import {
  batchTitle,
  formatTime,
  formatTokens,
  groupFacts,
  moreRunsText,
  rewardText,
  rolloutTitle,
  runGroupFacts,
  runGroupTime,
  runGroupTitle,
} from '../trainer-daemon/protocol/ui/rolloutText';
import { STATUS_CODICONS } from './dom';
import { assertNever } from '../trainer-daemon/protocol/assert';

export type Item =
  | { kind: 'rollout'; rollout: Rollout; depth: number }
  | { kind: 'run'; run: RolloutRunGroup; expanded: boolean }
  | { kind: 'batch'; batch: RolloutBatchGroup; run: RolloutRunGroup & { kind: 'training' }; expanded: boolean }
  | { kind: 'more'; runs: number; rollouts: number };

/** What a run row expands: a training run's batches (by its id), a dataset run's rollouts (its batch's section). */
export function runKey(run: RolloutRunGroup): string {
  return run.kind === 'training' ? `run:${run.runId}` : run.batchId;
}

/** Which row shows an item, across rebuilds: a row keeps its element while it shows the same rollout, run or batch. */
export function itemKey(item: Item): string {
  switch (item.kind) {
    case 'rollout':
      return `rollout:${item.rollout.id}`;
    case 'run':
      return `group:${runKey(item.run)}`;
    case 'batch':
      return `batch:${item.batch.batchId}`;
    case 'more':
      return 'more';
    default:
      return assertNever(item);
  }
}

/** A row that is not a rollout's: a run, a batch, "more runs". */
export type GroupItem = Exclude<Item, { kind: 'rollout' }>;

/** A rollout row's parts, filled by fillRolloutRow (the failure reason hidden unless it failed). */
export const ROLLOUT_ROW_HTML = `<div class="line1"><span class="status codicon"></span><span class="title"></span><span class="reward"></span></div>
<div class="line2"><span class="reason"></span><span class="mode"></span><span class="llm-calls"></span><span class="tokens"></span><span class="duration"></span><span class="time"></span></div>`;

/** A group row's parts, filled by fillGroupRow. */
export const GROUP_ROW_HTML = `<div class="line1"><span class="codicon chevron" aria-hidden="true"></span><span class="title"></span></div>
<div class="line2"><span class="group-facts"></span><span class="time"></span></div>`;

/** Fills a run's row, a batch's row inside a training run, or the "more runs" row. */
export function fillGroupRow(
  row: HTMLElement,
  item: GroupItem,
  state: { readonly focused: boolean; readonly canAskMore: boolean },
): void {
  const expanded = item.kind !== 'more' && item.expanded;
  const failed = item.kind === 'run' ? item.run.failed : item.kind === 'batch' ? item.batch.failed : 0;
  row.className = `group-row group-${item.kind}${expanded ? ' expanded' : ''}${failed > 0 ? ' has-failed' : ''}${state.focused ? ' focused' : ''}`;
  if (item.kind !== 'more') row.setAttribute('aria-expanded', String(expanded));
  const chevron = item.kind === 'more' ? 'ellipsis' : `chevron-${expanded ? 'down' : 'right'}`;
  row.querySelector('.chevron')!.className = `codicon codicon-${chevron} chevron`;
  const [title, facts, time] = groupTexts(item, state.canAskMore);
  setText(row, '.title', title);
  setText(row, '.group-facts', facts);
  setText(row, '.time', time);
  delete row.dataset.runId;
  delete row.dataset.batchId;
  switch (item.kind) {
    case 'run':
      if (item.run.kind === 'training') row.dataset.runId = item.run.runId;
      else row.dataset.batchId = item.run.batchId;
      row.title = item.run.kind === 'training' ? `training run ${item.run.runId}` : `batch ${item.run.batchId}`;
      break;
    case 'batch':
      row.dataset.batchId = item.batch.batchId;
      row.title = `batch ${item.batch.batchId}`;
      break;
    case 'more':
      row.title = 'Show more runs (the newest are listed first)';
      break;
    default:
      assertNever(item);
  }
}

/** A group row's title, its counts, and its time (a run's start, a batch's latest change). */
function groupTexts(item: GroupItem, canAskMore: boolean): [string, string, string] {
  switch (item.kind) {
    case 'run':
      return [runGroupTitle(item.run), runGroupFacts(item.run), runGroupTime(item.run)];
    case 'batch':
      return [batchTitle(item.batch, item.run.algorithm), groupFacts(item.batch), formatTime(item.batch.updatedAt)];
    case 'more':
      return [
        moreRunsText(item.runs, item.rollouts),
        canAskMore ? 'Show more runs' : 'Filter the list to find them',
        '',
      ];
    default:
      return assertNever(item);
  }
}

/** Fills a rollout's row: its status, title, reward, failure reason and facts. */
export function fillRolloutRow(
  row: HTMLElement,
  rollout: Rollout,
  depth: number,
  state: { readonly selected: boolean; readonly marked: boolean },
): void {
  row.className = `rollout-row status-${rollout.status}${depth > 0 ? ` nested depth-${depth}` : ''}${state.selected ? ' selected' : ''}${state.marked ? ' marked' : ''}`;
  row.dataset.rolloutId = rollout.id;
  row.setAttribute('aria-selected', String(state.selected));
  const status = row.querySelector<HTMLElement>('.status')!;
  status.className = `status codicon codicon-${STATUS_CODICONS[rollout.status]}`;
  status.title = rollout.status;
  setText(row, '.title', rolloutTitle(rollout));
  setText(row, '.reward', rewardText(rollout.reward));
  const failed = rollout.error !== null && (rollout.status === 'failed' || rollout.status === 'timeout');
  const reason = row.querySelector<HTMLElement>('.reason')!;
  reason.hidden = !failed;
  reason.textContent = reason.title = failed && rollout.error ? failureHeadline(rollout.error) : '';
  setText(row, '.mode', rollout.mode);
  setText(row, '.llm-calls', `${rollout.llmCalls} LLM call${rollout.llmCalls === 1 ? '' : 's'}`);
  setText(row, '.tokens', `${formatTokens(rollout.promptTokens + rollout.completionTokens)} tok`);
  setText(row, '.duration', formatDuration(rolloutDuration(rollout)));
  setText(row, '.time', formatTime(rollout.createdAt));
}

/** Sets a row part's text, leaving the node alone when it already says so. */
function setText(row: HTMLElement, selector: string, text: string): void {
  const part = row.querySelector(selector)!;
  if (part.textContent !== text) part.textContent = text;
}
