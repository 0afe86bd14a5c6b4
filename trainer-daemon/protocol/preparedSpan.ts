/**
 * A span as the store writes it (store/spans.ts): scrubbed and cut to size (recordScrub.ts), its attributes and events
 * already JSON text. The OTLP decode workers prepare the spans of an export sent to a rollout's URL, so the daemon's
 * main thread, which writes them, neither walks nor serializes them, and a span crosses from the worker as a few
 * strings instead of a tree of objects.
 *
 * A worker scrubs with the secret values it was given with the export (the process's and the rollout's, as the main
 * thread knew them then) and those it finds in the export's own header attributes, and each prepared span names that
 * list (`scrubbedWith`). The store writes it only if the list holds every secret known for the rollout at the write
 * (`lackingSecrets`), and otherwise refuses the write for the exporter to retry (a 503; the retried export is scrubbed
 * with what is known then): a second scrub of text already cut and redacted with a shorter list would not be the
 * same as one pass with the whole list (a secret across a cut, one inside another).
 */
import type { Json, SpanInput } from './records';
import { secretsOf } from './secrets';

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
    events: span.events.length === 0 ? '[]' : JSON.stringify(span.events),
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
