/**
 * The selected LLM call as a conversation: model, tokens (prompt, completion, reasoning) and
 * latency; the tools offered; each turn (system, user, assistant, tool) with its text, tool calls
 * and their arguments (pretty JSON), tool results, thinking collapsed; the response; the raw
 * request and response one click away; a copy button on every turn and on the raw JSON.
 */
import { button, el } from '../dom';
import { formatDuration } from '../../trainer-daemon/protocol/format';
import { blockText, turnText, type Block, type Conversation, type Turn } from './conversation';

function pretty(json: string): string {
  try {
    return JSON.stringify(JSON.parse(json), null, 2);
  } catch {
    return json;
  }
}

function blockElement(block: Block): HTMLElement {
  switch (block.kind) {
    case 'text':
      return el('div', 'content', block.text);
    case 'thinking': {
      const details = el('details', 'thinking');
      details.append(
        el('summary', undefined, `Thinking (${block.text.length} characters)`),
        el('div', 'content', block.text),
      );
      return details;
    }
    case 'toolCall': {
      const box = el('div', 'tool-call');
      box.append(
        el('div', 'tool-call-name', `→ ${block.name}${block.id ? `  (${block.id})` : ''}`),
        el('pre', 'tool-args', pretty(block.arguments)),
      );
      return box;
    }
    case 'toolResult': {
      const box = el('div', 'tool-result');
      box.append(
        el('div', 'tool-call-name', `← result${block.id ? ` of ${block.id}` : ''}`),
        el('pre', 'tool-output', pretty(block.text)),
      );
      return box;
    }
    case 'image':
      return el('div', 'muted', block.text);
  }
}

function turnElement(turn: Turn, copy: (text: string) => void, index: number): HTMLElement {
  const box = el('section', `turn role-${turn.role}`);
  box.setAttribute('aria-label', `${turn.role} turn ${index + 1}`);
  const head = el('div', 'turn-head');
  head.append(
    el('span', 'role', turn.role),
    button(
      'Copy',
      `Copy this ${turn.role} turn`,
      () => copy(turnText(turn) || turn.blocks.map(blockText).join('\n')),
      'copy-turn',
    ),
  );
  box.append(head, ...turn.blocks.map(blockElement));
  return box;
}

export function conversationElement(conversation: Conversation, copy: (text: string) => void): HTMLElement {
  const root = el('div', 'conversation');
  const tokens = [
    `${conversation.promptTokens ?? '?'} prompt`,
    `${conversation.completionTokens ?? '?'} completion`,
    ...(conversation.reasoningTokens !== null ? [`${conversation.reasoningTokens} reasoning`] : []),
  ].join(' + ');
  root.append(
    el(
      'div',
      'facts conversation-facts',
      `${conversation.model} · ${tokens} tokens · ${formatDuration(conversation.latencyMs)}`,
    ),
  );
  if (conversation.error) root.append(el('div', 'error', conversation.error));
  if (conversation.tools.length) {
    const tools = el('details', 'tools');
    tools.append(
      el(
        'summary',
        undefined,
        `Tools (${conversation.tools.length}): ${conversation.tools.map((tool) => tool.name).join(', ')}`,
      ),
    );
    for (const tool of conversation.tools)
      tools.append(el('div', 'tool', `${tool.name}${tool.description ? ` — ${tool.description}` : ''}`));
    root.append(tools);
  }
  root.append(el('h4', undefined, `Messages (${conversation.turns.length})`));
  conversation.turns.forEach((turn, index) => root.append(turnElement(turn, copy, index)));
  root.append(el('h4', undefined, 'Response'));
  if (conversation.response.length === 0) root.append(el('div', 'muted', 'No response recorded.'));
  conversation.response.forEach((turn, index) => root.append(turnElement(turn, copy, index)));
  const raw = el('div', 'raw step-actions');
  const pres: HTMLElement[] = [];
  for (const [label, value] of [
    ['request', conversation.request],
    ['response', conversation.rawResponse],
  ] as const) {
    const pre = el('pre', `raw-json raw-${label}`);
    pre.hidden = true;
    const json = (): string => JSON.stringify(value, null, 2) ?? 'null';
    raw.append(
      button(
        `Raw ${label}`,
        `Show the raw ${label} JSON`,
        () => {
          if (!pre.textContent) pre.textContent = json();
          pre.hidden = !pre.hidden;
        },
        `show-raw-${label}`,
      ),
      button(`Copy ${label}`, `Copy the raw ${label} JSON`, () => copy(json()), `copy-raw-${label}`),
    );
    pres.push(pre);
  }
  root.append(raw, ...pres);
  return root;
}
