/**
 * An export's spans made ready for the store, part by part, where they were decoded: in the decode worker, or inline
 * where there is none. The spans of an export sent to a rollout's URL are prepared (protocol/preparedSpan.ts):
 * scrubbed with the secret values the export came with (the process's and that rollout's, as the main thread knew
 * them) and those of their own header attributes, which are handed back with the part for the main thread to
 * remember for the rollout, as scrubSpan does there. The shared endpoint's spans name their own rollouts, whose
 * secrets this thread is not given: they go as they are, and the store scrubs them.
 */
import type { SpanInput } from '../protocol/records';
import { isPrepared, prepareSpan, type PreparedSpan } from '../protocol/preparedSpan';
import { scrubSpanWith, spanHeaderSecrets, withSecrets } from '../protocol/recordScrub';
import type { NormalizedSpan } from './normalize';

/** What an export's spans are scrubbed with: its URL's rollout (null: each span names its own) and what it knew. */
export interface ExportSecrets {
  readonly rolloutId: string | null;
  /** secretsOf(rolloutId) on the main thread when the export came, longest first. */
  readonly secrets: readonly string[];
}

export interface PreparedPart {
  /** Prepared for the URL's rollout; as decoded for the shared endpoint. */
  readonly spans: ReadonlyArray<{ readonly rolloutId: string | null; readonly span: PreparedSpan | SpanInput }>;
  /** Secret values found in this part's header attributes: the URL's rollout's (none for the shared endpoint). */
  readonly found: readonly string[];
}

export class ExportPreparer {
  /** The list the spans are scrubbed with, once a span's header attributes added to the export's. */
  private list: readonly string[];

  constructor(private readonly scrub: ExportSecrets) {
    this.list = scrub.secrets;
  }

  part(spans: readonly NormalizedSpan[]): PreparedPart {
    if (this.scrub.rolloutId === null) return { spans, found: [] };
    const found: string[] = [];
    const prepared = spans.map(({ rolloutId: named, span }) => {
      const headers = spanHeaderSecrets(span);
      const fresh = headers.length === 0 ? headers : headers.filter((value) => !this.list.includes(value));
      if (fresh.length > 0) {
        this.list = withSecrets(this.list, fresh);
        found.push(...fresh);
      }
      return { rolloutId: named, span: prepareSpan(scrubSpanWith(span, this.list), this.list) };
    });
    return { spans: prepared, found };
  }
}

/**
 * A part as it crosses from a decode worker to the main thread. Its prepared spans go as one flat array of their
 * fields rather than as objects: the main thread, which every request waits on, reads a structured clone of a flat
 * array of strings and numbers and makes the spans of it in about a third of the time a clone of the span objects
 * takes to read (~0.7 µs a span against ~2). The shared endpoint's spans (with their attributes, for the store to
 * scrub) go as they are.
 */
export type PartMessage =
  | {
      readonly packed: true;
      /**
       * PACKED_FIELDS values a span, in unpackPart's order. The list a span was scrubbed with is the part's same
       * array for the spans that share it (a structured clone keeps one copy of an object it meets twice).
       */
      readonly rows: readonly PackedValue[];
      readonly found: readonly string[];
    }
  | { readonly packed: false; readonly part: PreparedPart };

type PackedValue = string | number | boolean | null | readonly string[];

/** Values a packed span takes: its rollout and PreparedSpan's seventeen fields. */
const PACKED_FIELDS = 18;

/** `part` as it is posted to the main thread. */
export function packPart(part: PreparedPart): PartMessage {
  const rows: PackedValue[] = [];
  for (const { rolloutId, span } of part.spans) {
    if (!isPrepared(span)) return { packed: false, part };
    rows.push(
      rolloutId,
      span.traceId,
      span.spanId,
      span.parentSpanId,
      span.name,
      span.kind,
      span.category,
      span.startMs,
      span.endMs,
      span.statusCode,
      span.statusMessage,
      span.attributes,
      span.events,
      span.promptTokens,
      span.completionTokens,
      span.responseId,
      span.proxied,
      span.scrubbedWith,
    );
  }
  return { packed: true, rows, found: part.found };
}

/** The part packPart posted. */
export function unpackPart(message: PartMessage): PreparedPart {
  if (!message.packed) return message.part;
  const { rows } = message;
  const spans: Array<{ rolloutId: string | null; span: PreparedSpan }> = [];
  // The values are packPart's, in its order: each cast restates the field's type.
  for (let i = 0; i < rows.length; i += PACKED_FIELDS) {
    const span: PreparedSpan = {
      traceId: rows[i + 1] as string,
      spanId: rows[i + 2] as string,
      parentSpanId: rows[i + 3] as string | null,
      name: rows[i + 4] as string,
      kind: rows[i + 5] as PreparedSpan['kind'],
      category: rows[i + 6] as PreparedSpan['category'],
      startMs: rows[i + 7] as number,
      endMs: rows[i + 8] as number | null,
      statusCode: rows[i + 9] as PreparedSpan['statusCode'],
      statusMessage: rows[i + 10] as string | null,
      attributes: rows[i + 11] as string,
      events: rows[i + 12] as string,
      promptTokens: rows[i + 13] as number | null,
      completionTokens: rows[i + 14] as number | null,
      responseId: rows[i + 15] as string | null,
      proxied: rows[i + 16] as boolean,
      scrubbedWith: rows[i + 17] as readonly string[],
    };
    spans.push({ rolloutId: rows[i] as string | null, span });
  }
  return { spans, found: message.found };
}
