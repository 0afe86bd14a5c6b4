/**
 * An export's spans made ready for the store, part by part, where they were decoded: in the decode worker, or inline
 * where there is none. The spans of an export sent to a rollout's URL are prepared (protocol/preparedSpan.ts):
 * scrubbed with the secret values the export came with (the process's and that rollout's, as the main thread knew
 * them) and those of their own header attributes, which are handed back with the part for the main thread to
 * remember for the rollout, as scrubSpan does there. The shared endpoint's spans name their own rollouts, whose
 * secrets this thread is not given: they go as they are, and the store scrubs them.
 */
import type { SpanInput } from '../protocol/records';
import { prepareSpan, type PreparedSpan } from '../protocol/preparedSpan';
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
      const fresh = spanHeaderSecrets(span).filter((value) => !this.list.includes(value));
      if (fresh.length > 0) {
        this.list = withSecrets(this.list, fresh);
        found.push(...fresh);
      }
      return { rolloutId: named, span: prepareSpan(scrubSpanWith(span, this.list), this.list) };
    });
    return { spans: prepared, found };
  }
}
