/**
 * A decoded export cut into parts of bounded size: each crosses from the decode worker to the main
 * thread in its own message and is committed in its own write, so the main thread never spends more
 * than one part's work in one turn of its event loop, however large the export.
 */
import type { NormalizedSpan } from './normalize';

/** Spans per part: a commit of this many small spans takes a few milliseconds. */
export const PART_MAX_SPANS = 500;
/** Characters of strings per part (about bytes): a part of large spans is cut sooner. */
export const PART_MAX_CHARS = 4 * 1024 * 1024;

export function splitIntoParts(spans: readonly NormalizedSpan[]): NormalizedSpan[][] {
  const parts: NormalizedSpan[][] = [];
  let part: NormalizedSpan[] = [];
  let chars = 0;
  for (const span of spans) {
    const size = approximateSize(span.span.attributes) + approximateSize(span.span.events);
    if (part.length > 0 && (part.length >= PART_MAX_SPANS || chars + size > PART_MAX_CHARS)) {
      parts.push(part);
      part = [];
      chars = 0;
    }
    part.push(span);
    chars += size;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

/** The characters of a value's strings and keys, plus a little per other value; a loop, so depth cannot overflow it. */
function approximateSize(value: unknown): number {
  let size = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item === 'string') size += item.length;
    else if (Array.isArray(item)) {
      size += 2;
      for (const element of item) stack.push(element);
    } else if (typeof item === 'object' && item !== null) {
      for (const [key, element] of Object.entries(item)) {
        size += key.length + 2;
        stack.push(element);
      }
    } else size += 8;
  }
  return size;
}
