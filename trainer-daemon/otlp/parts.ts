/**
 * A decoded export cut into parts of bounded size: each crosses from the decode worker to the main
 * thread in its own message and is committed in its own write, so the main thread never spends more
 * than one part's work in one turn of its event loop, however large the export.
 */
import type { NormalizedSpan } from './normalize';

/**
 * Spans per part at most: a commit of this many small spans takes a few milliseconds. Each part costs a commit
 * (its pages written to the WAL), so an export is cut into as few parts as the bounds allow, of equal size: 1,100
 * spans make two parts of 550, not 1,024 and 76.
 */
export const PART_MAX_SPANS = 1024;
/** Characters of strings per part (about bytes): a part of large spans is cut sooner. */
export const PART_MAX_CHARS = 1024 * 1024;

export function splitIntoParts(spans: readonly NormalizedSpan[]): NormalizedSpan[][] {
  const parts: NormalizedSpan[][] = [];
  const perPart = Math.ceil(spans.length / Math.ceil(spans.length / PART_MAX_SPANS));
  let part: NormalizedSpan[] = [];
  let chars = 0;
  for (const span of spans) {
    const size = approximateSize(span.span.attributes) + approximateSize(span.span.events);
    if (part.length > 0 && (part.length >= perPart || chars + size > PART_MAX_CHARS)) {
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
      // for…in, not Object.entries: no array of pairs per object (this runs for every span of an export).
      for (const key in item) {
        if (!Object.hasOwn(item, key)) continue;
        size += key.length + 2;
        stack.push((item as Record<string, unknown>)[key]);
      }
    } else size += 8;
  }
  return size;
}
