/**
 * "Apply" for an optimized prompt: the edit that writes a new prompt into the source where the
 * original was marked — a whole prompt file, a selection of plain text, or the contents of a string
 * literal (JavaScript/TypeScript/Python quotes, template literals, triple quotes), re-escaped for
 * that literal. Pure (no Node, no VS Code), so the extension applies the result as an undoable edit.
 */

/** Where the original prompt is in the file: offsets (UTF-16, as VS Code's `offsetAt`) and the source text there. */
export interface PromptLocation {
  readonly start: number;
  readonly end: number;
  /** The file's text in [start, end) when the prompt was marked (as written: quotes excluded, escapes included). */
  readonly sourceText: string;
}

export interface PromptTextEdit {
  readonly start: number;
  readonly end: number;
  readonly newText: string;
}

export type LiteralKind = 'plain' | '"' | "'" | '`' | '"""' | "'''";

/** The kind of string literal the range [start, end) is the contents of ('plain' when it is not inside quotes). */
export function literalKind(text: string, start: number, end: number): LiteralKind {
  for (const quote of ['"""', "'''"] as const) {
    if (text.slice(start - 3, start) === quote && text.slice(end, end + 3) === quote) return quote;
  }
  for (const quote of ['"', "'", '`'] as const) {
    if (text[start - 1] === quote && text[end] === quote) return quote;
  }
  return 'plain';
}

/** The prompt a literal's source text stands for (the escapes JS and Python share undone). */
export function decodeLiteral(source: string, kind: LiteralKind): string {
  if (kind === 'plain') return source;
  return source.replace(/\\(u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[\s\S])/g, (_, escape: string) => {
    if (escape.startsWith('u{')) return String.fromCodePoint(parseInt(escape.slice(2, -1), 16));
    if (/^[ux][0-9a-fA-F]/.test(escape)) return String.fromCharCode(parseInt(escape.slice(1), 16));
    const simple: Record<string, string> = { n: '\n', t: '\t', r: '\r', '0': '\0', '\n': '' };
    return simple[escape] ?? escape;
  });
}

/** The source text of a prompt inside a literal of the given kind. */
export function encodeLiteral(prompt: string, kind: LiteralKind): string {
  switch (kind) {
    case 'plain':
      return prompt;
    case '"':
    case "'":
      return prompt
        .replace(/\\/g, '\\\\')
        .replace(/\n/g, '\\n')
        .replace(/\r/g, '\\r')
        .replace(/\t/g, '\\t')
        .replaceAll(kind, `\\${kind}`);
    case '`':
      return prompt.replace(/\\/g, '\\\\').replace(/`/g, '\\`').replace(/\$\{/g, '\\${');
    case '"""':
    case "'''":
      // Newlines stay real; only a run of the closing quote and backslashes need escaping.
      return prompt.replace(/\\/g, '\\\\').replaceAll(kind, `\\${kind[0]}${kind.slice(1)}`);
  }
}

/**
 * The edit that replaces the original prompt with `newPrompt`. When the file changed since the
 * prompt was marked, the original source text is looked for again (it must occur exactly once);
 * otherwise this throws with a message saying what to do.
 */
export function promptEdit(fileText: string, location: PromptLocation, newPrompt: string): PromptTextEdit {
  let start = location.start;
  if (fileText.slice(start, location.end) !== location.sourceText) {
    const first = location.sourceText === '' ? -1 : fileText.indexOf(location.sourceText);
    if (first < 0)
      throw new Error(
        'the original prompt is no longer in the file: mark the prompt again and re-run, or copy the new prompt by hand',
      );
    if (fileText.indexOf(location.sourceText, first + 1) >= 0)
      throw new Error('the original prompt now occurs more than once in the file: mark the one to replace again');
    start = first;
  }
  const end = start + location.sourceText.length;
  return { start, end, newText: encodeLiteral(newPrompt, literalKind(fileText, start, end)) };
}

/** Applies an edit to a text (what the editor's WorkspaceEdit does; for tests and the CLI). */
export function applyTextEdit(text: string, edit: PromptTextEdit): string {
  return text.slice(0, edit.start) + edit.newText + text.slice(edit.end);
}
