/**
 * The Training view of a rollout (`transitions/forRollout`): per LLM call, included in training or
 * not (and why), the reward credited, the advantage (against the rollout's task group in its batch),
 * token counts and whether the trainer re-tokenizes it — what `lightning export` would write.
 */
import type { RolloutTransitions } from '../trainer-daemon/protocol/lightningrl';
import { assertNever } from '../trainer-daemon/protocol/assert';
import { codicon, el } from './dom';

function num(value: number | null, digits = 3): string {
  return value === null ? '–' : String(Number(value.toFixed(digits)));
}

/** "GRPO, std-normalized", "baseline", "none": how the advantages were computed. */
function advantageText(advantage: RolloutTransitions['options']['advantage']): string {
  switch (advantage.kind) {
    case 'grpo':
      return `GRPO${advantage.normalizeStd ? ', std-normalized' : ''}`;
    case 'baseline':
    case 'none':
      return advantage.kind;
    default:
      return assertNever(advantage.kind);
  }
}

export function renderTrainingView(view: RolloutTransitions): HTMLElement {
  const box = el('div', 'training-view');
  box.dataset.rolloutId = view.rolloutId;
  const { group, options } = view;
  const credit = options.credit.kind === 'discounted' ? `discounted (γ ${options.credit.gamma})` : options.credit.kind;
  const advantage = advantageText(options.advantage);
  box.append(
    el(
      'div',
      view.included ? 'training-status included' : 'training-status excluded',
      view.included
        ? `In training: episode reward ${num(view.episodeReward)}, advantage ${num(view.advantage)}`
        : `Not in training: ${view.why ?? 'no call is a sample'}`,
    ),
    el(
      'div',
      'facts',
      `Group: ${group.scope === 'rollout' ? 'this rollout alone' : `${group.scope} ${group.scopeId}`}${group.taskId ? `, task ${group.taskId}` : ''} · ${group.rewarded} rewarded · mean ${num(group.mean)} · std ${num(group.std)}${group.note ? ` · ${group.note}` : ''}`,
    ),
    el(
      'div',
      'facts',
      `Credit ${credit} · advantage ${advantage} · episode reward "${options.reward.name}" (latest human, else agent, else automatic)${options.agent ? ` · agents /${options.agent}/` : ''}`,
    ),
  );
  if (view.calls.length === 0) box.append(el('div', 'muted', 'No LLM calls.'));
  for (const call of view.calls) {
    const row = el('div', `training-call ${call.included ? 'included' : 'excluded'}`);
    row.dataset.spanId = call.spanId;
    const tokens = `${call.promptTokens ?? '?'}→${call.completionTokens ?? '?'} tok`;
    const ids = call.included
      ? call.retokenized
        ? 're-tokenized'
        : `token ids ${call.promptTokenIds}+${call.responseTokenIds}`
      : '';
    const mark = el('span', 'call-mark');
    mark.append(codicon(call.included ? 'check' : 'close'), call.included ? ` #${call.step}` : '');
    mark.title = call.included ? 'trains' : 'left out';
    row.append(
      mark,
      el('span', 'step-name', call.name),
      el(
        'span',
        'muted',
        call.included
          ? ` reward ${num(call.reward)} · advantage ${num(call.advantage)} · ${tokens} · ${ids}`
          : ` ${call.why ?? ''} · ${tokens}`,
      ),
    );
    box.append(row);
  }
  return box;
}
