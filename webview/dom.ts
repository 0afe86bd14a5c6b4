/** Small DOM helpers the panel's views share: an element with a class and text, a secondary button. */
import { failureHeadline, failureOutput } from '../trainer-daemon/protocol/failureText';
import type { RolloutStatus } from '../trainer-daemon/protocol/records';

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string,
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined) element.textContent = text;
  return element;
}

/**
 * A codicon (VS Code's icon font, ./codicons.css), hidden from screen readers: the text beside it says what it means.
 */
export function codicon(name: string): HTMLElement {
  const icon = el('span', `codicon codicon-${name}`);
  icon.setAttribute('aria-hidden', 'true');
  return icon;
}

/** A status as its codicon, the status its title (`.status[title=failed]`). */
export const STATUS_CODICONS: Record<RolloutStatus, string> = {
  queued: 'circle',
  running: 'sync',
  succeeded: 'pass',
  failed: 'error',
  cancelled: 'circle-slash',
  timeout: 'watch',
};

export function statusIcon(status: RolloutStatus): HTMLElement {
  const icon = el('span', `status codicon codicon-${STATUS_CODICONS[status]}`);
  icon.title = status;
  return icon;
}

/**
 * A secondary vscode-button whose click does not reach the row or summary around it; a label's leading `$(name)` is a
 * codicon.
 */
export function button(label: string, aria: string, onClick: () => void, className = ''): HTMLElement {
  const element = document.createElement('vscode-button');
  element.setAttribute('secondary', '');
  element.setAttribute('aria-label', aria);
  element.title = aria;
  element.className = className;
  const icon = /^\$\(([a-z-]+)\)\s*/.exec(label);
  if (icon) element.append(codicon(icon[1]!), label.slice(icon[0].length));
  else element.textContent = label;
  element.addEventListener('click', (event) => {
    event.stopPropagation();
    onClick();
  });
  return element;
}

/** A span's raw JSON, hidden until its Raw JSON button is pressed, and a Copy JSON button: [actions, raw]. */
export function rawJsonControls(value: unknown, copy: (text: string) => void): [HTMLElement, HTMLElement] {
  const raw = el('pre', 'raw-json');
  raw.hidden = true;
  const actions = el('div', 'step-actions');
  actions.append(
    button(
      'Raw JSON',
      'Show the raw span JSON',
      () => {
        if (!raw.textContent) raw.textContent = JSON.stringify(value, null, 2);
        raw.hidden = !raw.hidden;
      },
      'show-raw',
    ),
    button('Copy JSON', 'Copy the raw span JSON', () => copy(JSON.stringify(value, null, 2)), 'copy-raw'),
  );
  return [actions, raw];
}

/**
 * A rollout's error: its reason on one line and, when it carries them, the agent's last output lines
 * in a collapsed block (protocol/failureText.ts reads the two parts).
 */
export function failureElement(error: string): HTMLElement {
  const block = el('div', 'error failure');
  block.append(el('div', 'failure-reason', failureHeadline(error)));
  const output = failureOutput(error);
  if (output) {
    const details = el('details', 'failure-output');
    details.append(el('summary', undefined, 'Last output lines'), el('pre', undefined, output));
    block.append(details);
  }
  return block;
}
