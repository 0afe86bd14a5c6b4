/**
 * A span as the store writes it (store/spans.ts): scrubbed and cut to size (recordScrub.ts), its attributes and events
 * already JSON text. The OTLP decode workers prepare an export's spans, so the daemon's main thread, which writes
 * them, neither walks nor serializes them, and a span crosses from the worker as a few strings instead of a tree of
 * objects.
 *
 * A worker knows only the secret values it was given with the export (the process's and its rollout's, then) and those
 * it finds in the export's own header attributes. So each prepared span names the list it was scrubbed with
 * (`scrubbedWith`), and the store scrubs it again, by value, for every secret it knows when it writes the span and
 * that list lacks (`rescrubbed`): what reaches the table is scrubbed with every secret known at the write, as a span
 * scrubbed in the write itself is.
 */
import type { Json, SpanInput } from './records';
import { scrubJsonValues } from './recordScrub';
import { REDACTED, secretsOf } from './secrets';

export interface PreparedSpan extends Omit<SpanInput, 'attributes' | 'events'> {
  /** The span's attributes as JSON text (an object). */
  readonly attributes: string;
  /** Its events as JSON text (an array). */
  readonly events: string;
  /** An LLM span's `gen_ai.response.id`, else null: how the proxy's record and an agent's span of one call pair. */
  readonly responseId: string | null;
  /** The proxy's record of a call (it carries `lightning.api`), not an agent's span. */
  readonly proxied: boolean;
  /** The secret values it was scrubbed with, longest first: one array for the spans of an export's part. */
  readonly scrubbedWith: readonly string[];
}

export function isPrepared(span: SpanInput | PreparedSpan): span is PreparedSpan {
  return typeof span.attributes === 'string';
}

/** A scrubbed span (scrubSpan, or scrubSpanWith `scrubbedWith`) as the store writes it. */
export function prepareSpan(span: SpanInput, scrubbedWith: readonly string[]): PreparedSpan {
  const responseId = span.attributes['gen_ai.response.id'];
  // Field by field: a spread with keys replaced takes V8's slow copy (recordScrub.ts#scrubSpanWith).
  return {
    traceId: span.traceId,
    spanId: span.spanId,
    parentSpanId: span.parentSpanId,
    name: span.name,
    kind: span.kind,
    category: span.category,
    startMs: span.startMs,
    endMs: span.endMs,
    statusCode: span.statusCode,
    statusMessage: span.statusMessage,
    attributes: JSON.stringify(span.attributes),
    events: JSON.stringify(span.events),
    promptTokens: span.promptTokens,
    completionTokens: span.completionTokens,
    responseId: span.category === 'llm' && typeof responseId === 'string' ? responseId : null,
    proxied: 'lightning.api' in span.attributes,
    scrubbedWith,
  };
}

/** A prepared span's attributes, read back to change them (a late span's marks, a call's twin). */
export function preparedAttributes(span: PreparedSpan): Record<string, Json> {
  return JSON.parse(span.attributes) as Record<string, Json>;
}

/** `span` with these attributes. */
export function withAttributes(span: PreparedSpan, attributes: Record<string, Json>): PreparedSpan {
  return { ...span, attributes: JSON.stringify(attributes) };
}

/**
 * `span` with these secret values (ones its `scrubbedWith` lacked) redacted wherever they occur: its name, status
 * message, and every string of its attributes and events. By value only: it was cut to size when prepared. The same
 * span when none occurs in it, which the JSON text shows without reading it back (a secret's characters as
 * JSON.stringify writes them inside a string).
 */
export function rescrubbed(span: PreparedSpan, secrets: readonly string[]): PreparedSpan {
  if (secrets.length === 0) return span;
  const escaped = secrets.map((secret) => JSON.stringify(secret).slice(1, -1));
  const inJson = (text: string): boolean => escaped.some((secret) => text.includes(secret));
  const inText = (text: string | null): boolean => text !== null && secrets.some((secret) => text.includes(secret));
  if (!inJson(span.attributes) && !inJson(span.events) && !inText(span.name) && !inText(span.statusMessage))
    return span;
  const redact = (text: string): string =>
    secrets.reduce((out, secret) => (out.includes(secret) ? out.split(secret).join(REDACTED) : out), text);
  return {
    ...span,
    name: redact(span.name),
    statusMessage: span.statusMessage === null ? null : redact(span.statusMessage),
    attributes: inJson(span.attributes)
      ? JSON.stringify(scrubJsonValues(JSON.parse(span.attributes) as Json, secrets))
      : span.attributes,
    events: inJson(span.events)
      ? JSON.stringify(scrubJsonValues(JSON.parse(span.events) as Json, secrets))
      : span.events,
  };
}

/**
 * For a write of one rollout's spans: the secret values known for it at that moment (secretsOf) that a prepared span's
 * list lacks. Asked per span, worked out once per list (the spans of a part share one) while what is known stays the
 * same.
 */
export function lackingSecrets(rolloutId: string): (scrubbedWith: readonly string[]) => readonly string[] {
  const byList = new Map<readonly string[], { known: readonly string[]; lacking: readonly string[] }>();
  return (scrubbedWith) => {
    const known = secretsOf(rolloutId);
    let entry = byList.get(scrubbedWith);
    if (entry?.known !== known) {
      const had = new Set(scrubbedWith);
      entry = { known, lacking: known.filter((secret) => !had.has(secret)) };
      byList.set(scrubbedWith, entry);
    }
    return entry.lacking;
  };
}
