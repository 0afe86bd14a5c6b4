/**
 * An export's spans prepared for the store (protocol/preparedSpan.ts), part by part, where they were decoded: in the
 * decode worker, or inline where there is none. Each span is scrubbed with the secret values the export came with
 * (the process's and its rollout's, as the main thread knew them) and those of its own header attributes; what these
 * find is handed back with the part, for the main thread to remember for the rollout, as scrubSpan does there.
 */
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
  readonly spans: Array<{ readonly rolloutId: string | null; readonly span: PreparedSpan }>;
  /** Secret values found in this part's header attributes, by the rollout their spans are stored for. */
  readonly found: Array<[rolloutId: string, values: string[]]>;
}

export class ExportPreparer {
  /** Per rollout, the list its spans are scrubbed with once a span's headers added to the export's. */
  private readonly lists = new Map<string, readonly string[]>();

  constructor(private readonly scrub: ExportSecrets) {}

  part(spans: readonly NormalizedSpan[]): PreparedPart {
    const found = new Map<string, string[]>();
    const prepared = spans.map(({ rolloutId, span }) => {
      const target = this.scrub.rolloutId ?? rolloutId;
      let list = (target === null ? undefined : this.lists.get(target)) ?? this.scrub.secrets;
      const fresh = spanHeaderSecrets(span).filter((value) => !list.includes(value));
      if (fresh.length > 0) {
        list = withSecrets(list, fresh);
        if (target !== null) {
          this.lists.set(target, list);
          const values = found.get(target);
          if (values) values.push(...fresh);
          else found.set(target, fresh);
        }
      }
      return { rolloutId, span: prepareSpan(scrubSpanWith(span, list), list) };
    });
    return { spans: prepared, found: [...found] };
  }
}
