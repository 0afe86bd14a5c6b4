/** Small DOM helpers the panel's views share: an element with a class and text, a secondary button. */
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

/** A secondary vscode-button whose click does not reach the row or summary around it. */
export function button(label: string, aria: string, onClick: () => void, className = ''): HTMLElement {
  const element = document.createElement('vscode-button');
  element.setAttribute('secondary', '');
  element.setAttribute('aria-label', aria);
  element.title = aria;
  element.className = className;
  element.textContent = label;
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
