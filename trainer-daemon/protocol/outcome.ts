/**
 * How an LLM call ended, for the record and for training (docs/export.md, "Only whole answers train"):
 * a whole answer (`ok`), an upstream error (with the HTTP status the agent saw), a call the client
 * cancelled mid-call or mid-stream, or one whose record was cut at a size limit. Only `ok` calls are
 * trained on by default. The proxy writes it as span attributes (`lightning.outcome`, plus
 * `lightning.truncated_by`), so no store migration is needed and OTLP spans read the same way:
 * `spanOutcome` derives it for spans that carry none (an exporter's error status is an error).
 */
import { assertNever } from './assert';
import { jsonString } from './json';
import type { Json } from './records';
import type { CallOutcome, SkippedCalls, TruncationLimit } from './outcomeSchema';
import { TRUNCATION_LIMITS } from './outcomeValues';

// No zod at run time here: the webview bundles import these functions (test/unit/imports.test.ts); the
// schemas are in outcomeSchema.ts.

function isTruncationLimit(value: Json | undefined): value is TruncationLimit {
  return typeof value === 'string' && (TRUNCATION_LIMITS as readonly string[]).includes(value);
}

export const OUTCOME_ATTRIBUTE = 'lightning.outcome';
export const TRUNCATED_BY_ATTRIBUTE = 'lightning.truncated_by';
/** The span id of the failed attempt this call repeats (same rollout, same request body). */
export const RETRY_OF_ATTRIBUTE = 'lightning.retry_of';

type Attributes = Readonly<Record<string, Json>>;

/** The attributes that record `outcome` (the HTTP status is `http.response.status_code`'s, or ours). */
export function outcomeAttributes(outcome: CallOutcome): Record<string, Json> {
  switch (outcome.kind) {
    case 'ok':
    case 'cancelled':
      return { [OUTCOME_ATTRIBUTE]: outcome.kind };
    case 'upstream_error':
      return { [OUTCOME_ATTRIBUTE]: outcome.kind, 'lightning.outcome_status': outcome.status };
    case 'truncated':
      return { [OUTCOME_ATTRIBUTE]: outcome.kind, [TRUNCATED_BY_ATTRIBUTE]: outcome.limit };
    default:
      return assertNever(outcome);
  }
}

/**
 * The attributes of a span whose record was cut at `limit` where the store took it: an ok call
 * becomes truncated; an error or a cancelled call stays what it was (that is why it is not whole).
 */
export function markTruncated(attributes: Record<string, Json>, limit: TruncationLimit): Record<string, Json> {
  const current = attributes[OUTCOME_ATTRIBUTE];
  if (current !== undefined && current !== 'ok') return attributes;
  return { ...attributes, ...outcomeAttributes({ kind: 'truncated', limit }) };
}

interface OutcomeSource {
  readonly statusCode: 'unset' | 'ok' | 'error';
  readonly statusMessage?: string | null;
  readonly attributes: Attributes;
}

function statusOf(attributes: Attributes): number | null {
  for (const key of ['lightning.outcome_status', 'http.response.status_code', 'http.status_code']) {
    const value = attributes[key];
    if (typeof value === 'number' && Number.isInteger(value)) return value;
  }
  return null;
}

/** A span's outcome: as recorded, else derived (OTLP spans, records made before outcomes were). */
export function spanOutcome(span: OutcomeSource): CallOutcome {
  const recorded = jsonString(span.attributes[OUTCOME_ATTRIBUTE]);
  switch (recorded) {
    case 'ok':
    case 'cancelled':
      return { kind: recorded };
    case 'upstream_error':
      return { kind: 'upstream_error', status: statusOf(span.attributes) };
    case 'truncated': {
      const limit = span.attributes[TRUNCATED_BY_ATTRIBUTE];
      return { kind: 'truncated', limit: isTruncationLimit(limit) ? limit : 'record_chars' };
    }
    default:
      break;
  }
  if (span.statusCode === 'error') {
    return /^cancelled\b/i.test(span.statusMessage ?? '')
      ? { kind: 'cancelled' }
      : { kind: 'upstream_error', status: statusOf(span.attributes) };
  }
  const response = span.attributes['lightning.response'];
  if (
    response !== null &&
    typeof response === 'object' &&
    !Array.isArray(response) &&
    'lightning_truncated' in response
  )
    return { kind: 'truncated', limit: 'stream_content' };
  return { kind: 'ok' };
}

/** Finish reasons that say the model stopped at the request's output-token cap (OpenAI, Anthropic, Gemini, OTLP). */
const TOKEN_CAP_REASONS = new Set(['length', 'max_tokens', 'MAX_TOKENS', 'max_output_tokens']);

/**
 * Whether the reply a row would take (the first choice's) stopped at the request's output-token cap: the whole answer
 * the model gave under the agent's limit, but cut. RL trains on it as sampled (a policy learns to finish within its
 * cap from the rewards of such samples); a chat row leaves it out by default, as a cut reply is no demonstration.
 * Read from `gen_ai.response.finish_reasons` (the proxy's records and OTLP spans alike); a Responses answer's
 * `incomplete` status counts unless its `incomplete_details` name another reason (a content filter).
 */
export function stoppedAtTokenCap(attributes: Attributes): boolean {
  const reasons = attributes['gen_ai.response.finish_reasons'];
  const first = Array.isArray(reasons) ? reasons[0] : reasons;
  if (typeof first !== 'string') return false;
  if (TOKEN_CAP_REASONS.has(first)) return true;
  if (first !== 'incomplete') return false;
  const response = attributes['lightning.response'];
  const details =
    response !== null && typeof response === 'object' && !Array.isArray(response)
      ? response.incomplete_details
      : undefined;
  const reason =
    details !== null && typeof details === 'object' && !Array.isArray(details) ? details.reason : undefined;
  return reason === undefined || reason === null || reason === 'max_output_tokens';
}

/** The badge of a whole answer that stopped at its output-token cap. */
export const TOKEN_CAP_WORD = 'stopped at its token cap';

/** The span id of the attempt a call repeats, when it is a retry. */
export function retryOf(span: { readonly attributes: Attributes }): string | null {
  const value = span.attributes[RETRY_OF_ATTRIBUTE];
  return typeof value === 'string' ? value : null;
}

const LIMIT_WORDS: Record<TruncationLimit, string> = {
  stream_content: 'stream content limit',
  record_chars: 'record size limit',
  string_chars: 'string size limit',
  depth: 'nesting limit',
  response_body: 'response body limit',
  sse_event: 'stream event size limit',
  rollout_ended: 'answered after the rollout ended',
};

/** A short word for a badge or a table cell: `ok`, `HTTP 429`, `cancelled`, `truncated (record size limit)`. */
export function outcomeWord(outcome: CallOutcome): string {
  switch (outcome.kind) {
    case 'ok':
      return 'ok';
    case 'upstream_error':
      // An error event inside a 200 stream, or a connection that broke, has no error status to name.
      return outcome.status === null || outcome.status < 400 ? 'upstream error' : `HTTP ${outcome.status}`;
    case 'cancelled':
      return 'cancelled';
    case 'truncated':
      return `truncated (${LIMIT_WORDS[outcome.limit]})`;
    default:
      return assertNever(outcome);
  }
}

export function noSkippedCalls(): SkippedCalls {
  return { upstreamError: 0, cancelled: 0, truncated: 0 };
}

export function countSkipped(skipped: SkippedCalls, outcome: CallOutcome): void {
  switch (outcome.kind) {
    case 'ok':
      return;
    case 'upstream_error':
      skipped.upstreamError += 1;
      return;
    case 'cancelled':
      skipped.cancelled += 1;
      return;
    case 'truncated':
      skipped.truncated += 1;
      return;
    default:
      assertNever(outcome);
  }
}

/** Adds `more`'s counts into `into`. */
export function addSkipped(into: SkippedCalls, more: SkippedCalls): void {
  into.upstreamError += more.upstreamError;
  into.cancelled += more.cancelled;
  into.truncated += more.truncated;
}

export function skippedTotal(skipped: SkippedCalls): number {
  return skipped.upstreamError + skipped.cancelled + skipped.truncated;
}

/** A training run's metrics of the calls it left out as not whole answers (GRPO each step, SFT at step 0). */
export function skippedCallMetrics(skipped: SkippedCalls): Record<string, number> {
  return {
    'skipped/upstreamErrors': skipped.upstreamError,
    'skipped/cancelled': skipped.cancelled,
    'skipped/truncated': skipped.truncated,
  };
}

/** `skipped: 2 upstream errors, 1 cancelled, 1 truncated`; null when nothing was left out. */
export function describeSkipped(skipped: SkippedCalls): string | null {
  const parts: string[] = [];
  if (skipped.upstreamError)
    parts.push(`${skipped.upstreamError} upstream error${skipped.upstreamError === 1 ? '' : 's'}`);
  if (skipped.cancelled) parts.push(`${skipped.cancelled} cancelled`);
  if (skipped.truncated) parts.push(`${skipped.truncated} truncated`);
  return parts.length ? `skipped: ${parts.join(', ')}` : null;
}

/**
 * What the panel, the rollout tab and `lightning show` print beside an LLM call: its outcome when
 * it was not a whole answer (or that it stopped at its token cap), and `retry of #N` (N: the sequence of the attempt
 * it repeats); null for a whole answer that ran to its end and repeats nothing.
 */
export function callBadge(
  span: OutcomeSource & { readonly category: string },
  sequenceOf: (spanId: string) => number | undefined,
): string | null {
  if (span.category !== 'llm') return null;
  const outcome = spanOutcome(span);
  const repeated = retryOf(span);
  const sequence = repeated === null ? undefined : sequenceOf(repeated);
  const parts = [
    ...(outcome.kind === 'ok' ? (stoppedAtTokenCap(span.attributes) ? [TOKEN_CAP_WORD] : []) : [outcomeWord(outcome)]),
    ...(repeated === null ? [] : [sequence === undefined ? 'retry' : `retry of #${sequence}`]),
  ];
  return parts.length ? parts.join(' · ') : null;
}
