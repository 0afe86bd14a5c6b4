/**
 * What **Optimize This Prompt** optimizes: a selection (the contents of a string literal, or plain
 * text), the string literal under the cursor, or a whole prompt file. Pure over the document's
 * text and offsets (UTF-16, as VS Code's `offsetAt`), so it is unit-tested without an editor; the
 * location it returns is what promptEdit later needs to write the optimized prompt back.
 */
import {
  decodeLiteral,
  literalKind,
  type LiteralKind,
  type PromptLocation,
} from '../../trainer-daemon/protocol/promptEdit';

export interface PromptTarget {
  readonly location: PromptLocation;
  readonly kind: LiteralKind;
  /** The prompt the source stands for (escapes undone). */
  readonly prompt: string;
  /** The whole file is the prompt (the agent may load it from disk: APO's --prompt-file). */
  readonly wholeFile: boolean;
}

const QUOTES = ['"""', "'''", '"', "'", '`'] as const;

/** Whether `inner` has a `quote` that is not escaped (so the selection spans more than one literal). */
function hasUnescaped(inner: string, quote: string): boolean {
  for (let i = 0; i < inner.length; i += 1) {
    if (inner[i] === '\\') i += 1;
    else if (inner.startsWith(quote, i)) return true;
  }
  return false;
}

/** A selection that includes its quotes is narrowed to the literal's contents. */
function withoutQuotes(text: string, start: number, end: number): [number, number] {
  for (const quote of QUOTES) {
    const inner = text.slice(start + quote.length, end - quote.length);
    if (
      end - start >= 2 * quote.length &&
      text.startsWith(quote, start) &&
      text.startsWith(quote, end - quote.length) &&
      !hasUnescaped(inner, quote)
    )
      return [start + quote.length, end - quote.length];
  }
  return [start, end];
}

/** The contents of the string literal on the cursor's line that contains the cursor (quotes excluded), if any. */
export function literalAround(text: string, offset: number): [number, number] | undefined {
  const lineStart = text.lastIndexOf('\n', offset - 1) + 1;
  const newline = text.indexOf('\n', offset);
  const lineEnd = newline < 0 ? text.length : newline;
  let open: { quote: string; at: number } | undefined;
  for (let i = lineStart; i < lineEnd; i += 1) {
    const ch = text[i]!;
    if (open) {
      if (ch === '\\') i += 1;
      else if (ch === open.quote) {
        if (open.at <= offset && offset <= i) return [open.at, i];
        open = undefined;
      }
    } else if (ch === '"' || ch === "'" || ch === '`') open = { quote: ch, at: i + 1 };
    else if (ch === '/' && text[i + 1] === '/') return undefined;
  }
  return undefined;
}

/** Files whose whole text is a prompt when nothing is selected. */
export function isPromptFile(fileName: string, languageId: string): boolean {
  return ['plaintext', 'markdown', 'prompt'].includes(languageId) || /\.(txt|md|prompt|j2|jinja)$/i.test(fileName);
}

/**
 * The prompt to optimize: the selection when there is one, else the string literal around the
 * cursor, else the whole file when it is a prompt file; undefined when there is nothing to take.
 */
export function promptTarget(
  text: string,
  selection: { start: number; end: number },
  promptFile: boolean,
): PromptTarget | undefined {
  let range: [number, number] | undefined;
  if (selection.end > selection.start) range = withoutQuotes(text, selection.start, selection.end);
  else range = literalAround(text, selection.start);
  if (range && range[1] > range[0]) {
    const [start, end] = range;
    const wholeFile = start === 0 && end === text.length;
    const kind = literalKind(text, start, end);
    return {
      location: { start, end, sourceText: text.slice(start, end) },
      kind,
      prompt: decodeLiteral(text.slice(start, end), kind),
      wholeFile,
    };
  }
  if (!promptFile || text.trim() === '') return undefined;
  return { location: { start: 0, end: text.length, sourceText: text }, kind: 'plain', prompt: text, wholeFile: true };
}

/**
 * A resource name suggested for the prompt: the identifier it is assigned to (`const SYSTEM_PROMPT
 * = "…"` → `system-prompt`), else the file's name (`prompts/triage.txt` → `triage`).
 */
export function defaultResourceName(text: string, start: number, fileName: string): string {
  const before = text.slice(text.lastIndexOf('\n', start - 1) + 1, start);
  const assigned = /([A-Za-z_$][\w$]*)\s*[:=]\s*(?:f|r|[A-Za-z_$][\w$.]*\()?\s*("""|'''|["'`])?$/.exec(before)?.[1];
  const base = fileName
    .split(/[\\/]/)
    .pop()!
    .replace(/\.[^.]*$/, '');
  const raw = assigned ?? base;
  const kebab = raw
    .replace(/([a-z0-9])([A-Z])/g, '$1-$2')
    .replace(/[^A-Za-z0-9.]+/g, '-')
    .replace(/^[^A-Za-z]+/, '')
    .toLowerCase()
    .slice(0, 100);
  return kebab || 'prompt';
}
