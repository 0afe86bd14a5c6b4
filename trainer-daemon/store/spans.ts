/**
 * Spans: numbered in arrival order within their rollout, de-duplicated by span id (an exporter that
 * retries a batch does not create copies), with the rollout's counters updated in the same
 * transaction so the panel's list never disagrees with the trajectory.
 */
import type { TrainingSpan } from '../protocol/lightningrl';
import type { StoredSpanRef } from './changes';
import type { Database, Statement } from './driver';
import { Span, SpanInput, describeIssues, type Json, type SpanResult } from '../protocol';
import { NotFoundError, OverloadedError } from '../protocol/errors';
import { markTruncated, OUTCOME_ATTRIBUTE, outcomeAttributes, TRUNCATED_BY_ATTRIBUTE } from '../protocol/outcome';
import {
  isPrepared,
  lackingSecrets,
  prepareSpan,
  preparedAttributes,
  withAttributes,
  type PreparedSpan,
} from '../protocol/preparedSpan';
import { scrubSpan } from '../protocol/recordScrub';
import { secretsOf } from '../protocol/secrets';
import type { RolloutStatus } from '../protocol/records';

interface SpanRow {
  rollout_id: string;
  attempt: number;
  sequence: number;
  trace_id: string;
  span_id: string;
  parent_span_id: string | null;
  name: string;
  kind: Span['kind'];
  category: Span['category'];
  start_ms: number;
  end_ms: number | null;
  status_code: Span['statusCode'];
  status_message: string | null;
  attributes: string;
  events: string;
  prompt_tokens: number | null;
  completion_tokens: number | null;
}

function rowToSpan(row: SpanRow): Span {
  return {
    rolloutId: row.rollout_id,
    attempt: row.attempt,
    sequence: row.sequence,
    traceId: row.trace_id,
    spanId: row.span_id,
    parentSpanId: row.parent_span_id,
    name: row.name,
    kind: row.kind,
    category: row.category,
    startMs: row.start_ms,
    endMs: row.end_ms,
    statusCode: row.status_code,
    statusMessage: row.status_message,
    attributes: JSON.parse(row.attributes) as Record<string, Json>,
    events: JSON.parse(row.events) as Span['events'],
    promptTokens: row.prompt_tokens,
    completionTokens: row.completion_tokens,
  };
}

export interface SpanBatch {
  readonly rolloutId: string;
  /**
   * Already validated where they entered the process (RPC, proxy, OTLP receiver); an OTLP export's come prepared by
   * its decode worker (protocol/preparedSpan.ts).
   */
  readonly spans: ReadonlyArray<SpanInput | PreparedSpan>;
  /**
   * The attempt whose key these spans came with (a proxy's record of a call, an OTLP export to the rollout's URL or
   * with its key): when that attempt is over by the time they are written (the rollout ended, or the attempt timed out
   * or failed and the rollout waits for or runs its next), they are kept with their attempt, marked late
   * (`lightning.late`; a call's outcome `truncated` by `rollout_ended`) and left out of training. Checked in the
   * write itself, against what the write reads anyway: nothing racing its attempt's end slips in unmarked, nor into
   * the next attempt's trajectory. Undefined (spans that name their rollout only): the rollout's current attempt.
   */
  readonly attempt?: number;
}

/** A span of `attempt` written when that attempt was over: the rollout's state then. */
interface Lateness {
  readonly attempt: number;
  readonly status: RolloutStatus;
  readonly current: number;
}

/** Whether a span of `attempt` is late, given its rollout's state when it is written: null when it is not. */
function lateness(attempt: number, rollout: { status: RolloutStatus; attempt_count: number }): Lateness | null {
  if (rollout.status === 'running' && rollout.attempt_count === attempt) return null;
  return { attempt, status: rollout.status, current: rollout.attempt_count };
}

/** The truncations a scrub makes (recordScrub.ts): a record limit reached. */
const RECORD_CUTS: ReadonlySet<Json | undefined> = new Set(['string_chars', 'record_chars', 'depth']);

/**
 * `span` as stored when it was written late: marked `lightning.late` (what training and LightningRL leave out), and a
 * call's outcome `truncated` by `rollout_ended` (it is not a whole answer the rollout's reward saw).
 */
function markedLate(span: PreparedSpan, late: Lateness): PreparedSpan {
  const what = span.category === 'llm' ? 'call' : 'span';
  const when =
    late.status === 'succeeded' || late.status === 'cancelled'
      ? `the rollout had ended (${late.status}) when this ${what} was recorded`
      : `its attempt ${late.attempt} had ended when this ${what} was recorded (the rollout ${
          late.status === 'running' ? `runs attempt ${late.current}` : `is ${late.status}`
        })`;
  const attributes = preparedAttributes(span);
  // Late wins over a cut its scrub made (a record limit, marked before lateness is known): the attempt's end is why it
  // is not whole, as when it was marked late before it was scrubbed. Another truncation (the proxy's) stays.
  const cut = attributes[OUTCOME_ATTRIBUTE] === 'truncated' && RECORD_CUTS.has(attributes[TRUNCATED_BY_ATTRIBUTE]);
  const marked =
    span.category !== 'llm'
      ? attributes
      : cut
        ? { ...attributes, ...outcomeAttributes({ kind: 'truncated', limit: 'rollout_ended' }) }
        : markTruncated(attributes, 'rollout_ended');
  return withAttributes(span, { ...marked, 'lightning.late': `${when}; it is kept, and left out of training` });
}

/** What happened to each span of a batch, in order: stored (with its sequence) or a duplicate. */
export type StoredSpanResult = Extract<SpanResult, { kind: 'stored' | 'duplicate' }>;

export interface SpanBatchOutcome {
  readonly results: StoredSpanResult[];
  readonly stored: StoredSpanRef[];
}

/**
 * Checks raw spans one by one, as they enter the process: the valid ones to store, and a result
 * slot per input (filled with `invalid` for the bad ones) so one bad span never fails a batch.
 */
export function validateSpans(raw: readonly unknown[]): {
  valid: SpanInput[];
  validIndexes: number[];
  results: SpanResult[];
} {
  const valid: SpanInput[] = [];
  const validIndexes: number[] = [];
  const results = new Array<SpanResult>(raw.length);
  raw.forEach((item, index) => {
    const parsed = SpanInput.safeParse(item);
    if (parsed.success) {
      valid.push(parsed.data);
      validIndexes.push(index);
    } else {
      results[index] = { kind: 'invalid', index, error: describeIssues(parsed.error, `spans.${index}`) };
    }
  });
  return { valid, validIndexes, results };
}

/** The part of a span LightningRL reads. */

interface TwinRow {
  response_id: string;
  span_id: string;
  proxied: number;
  /** For a proxy record: whether an OTLP span of the same call was already tied to it. */
  paired: number;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  trace_id: string;
  start_ms: number;
  end_ms: number | null;
}

/**
 * One LLM call seen twice — by the proxy and in the agent's OTLP spans, recognised by the same
 * `gen_ai.response.id` — is one step. The proxy's record (exact request and response) stays the
 * `llm` step, whichever arrives first; the other becomes `other` with `lightning.same_call_as`.
 * A proxy record's twin can only be an OTLP span, never another proxy record: servers that answer
 * every call with the same id (local servers, test doubles) must not merge two calls into one. An
 * OTLP span ties to the earliest proxy record of that id not tied yet; without one, to a span of the
 * same call only — another instrumentation's OTLP span of it (the SDK's and the framework's), in the
 * same trace and overlapping in time, or the proxy's record that it overlaps (a third view). Two OTLP
 * spans of one id in other traces, or one after the other, are two calls (a server that answers every
 * call with the same id), and both stay steps.
 */
function pairWithTwin(
  twins: ReadonlyMap<string, TwinRow[]>,
  span: PreparedSpan,
): { span: PreparedSpan; replaced?: TwinRow; pairedWith?: TwinRow } {
  const responseId = span.responseId;
  if (responseId === null) return { span };
  const candidates = (twins.get(responseId) ?? []).filter((row) => row.span_id !== span.spanId);
  if (span.proxied) {
    // The OTLP span of this very call when the clocks show it (it encloses the proxy's record), else the earliest.
    const otlp =
      candidates.find((row) => !row.proxied && overlaps(row, span)) ?? candidates.find((row) => !row.proxied);
    return otlp ? { span, replaced: otlp } : { span };
  }
  const twin =
    candidates.find((row) => row.proxied && !row.paired) ??
    candidates.find((row) => !row.proxied && row.trace_id === span.traceId && overlaps(row, span)) ??
    // A third view of a call the proxy recorded and one instrumentation already tied (the framework's span around
    // the SDK's): the proxy's record of it, which it encloses in time.
    candidates.find((row) => row.proxied && overlaps(row, span));
  if (!twin) return { span };
  const attributes = { ...preparedAttributes(span), 'lightning.same_call_as': twin.span_id };
  return { span: { ...withAttributes(span, attributes), category: 'other', responseId: null }, pairedWith: twin };
}

/** Whether a stored span and `span` overlap in time (views of one call do: each encloses the proxy's). */
function overlaps(row: TwinRow, span: PreparedSpan): boolean {
  const rowEnd = row.end_ms ?? row.start_ms;
  const spanEnd = span.endMs ?? span.startMs;
  return row.start_ms <= spanEnd && span.startMs <= rowEnd;
}

/**
 * How many of the latest LLM spans of one response id the twin lookup reads: a call's twins arrive within a
 * few calls of it, and a server that answers every call with the same id would otherwise make each lookup read
 * the whole rollout's calls (ingest quadratic in its length).
 */
export const TWIN_WINDOW = 64;

/**
 * The twin lookup, one query per batch: the latest TWIN_WINDOW LLM spans of the rollout for each response id
 * the batch carries, oldest first. Both halves go by index, never by walking the rollout's spans, which made a
 * long rollout's ingest quadratic: the response ids through spans_by_response_id (newest first by rowid, which
 * the index holds in order within a key), `paired` through spans_by_same_call (migration 9; `+s.span_id` drops
 * the column's TEXT affinity, without which SQLite cannot compare through that expression index). Exported for
 * the test that holds its query plan. Parameters: the response ids as a JSON array, the rollout's key (its seq).
 */
export const TWINS_QUERY = `SELECT s.response_id, s.span_id, json_extract(s.attributes, '$."lightning.api"') IS NOT NULL AS proxied,
  EXISTS (SELECT 1 FROM spans o WHERE o.rollout = s.rollout AND o.category = 'other'
    AND json_extract(o.attributes, '$."lightning.same_call_as"') = +s.span_id) AS paired,
  s.prompt_tokens, s.completion_tokens, s.trace_id, s.start_ms, s.end_ms
  FROM json_each(?) ids CROSS JOIN spans s ON s.id IN (SELECT r.id FROM spans r
    WHERE r.rollout = ? AND r.response_id = ids.value ORDER BY r.id DESC LIMIT ${TWIN_WINDOW})
  ORDER BY +s.sequence`;

export class SpanRepository {
  private readonly counters: Statement<
    [string],
    { seq: number; span_count: number; attempt_count: number; status: RolloutStatus }
  >;
  private readonly insert: Statement;
  private readonly bump: Statement;
  private readonly ofRollout: Statement<[string], SpanRow>;
  private readonly after: Statement<[string, number, number], SpanRow>;
  private readonly forTraining: Statement<
    [string],
    Pick<
      SpanRow,
      | 'rollout_id'
      | 'span_id'
      | 'parent_span_id'
      | 'trace_id'
      | 'sequence'
      | 'category'
      | 'start_ms'
      | 'end_ms'
      | 'attributes'
      | 'name'
      | 'status_code'
      | 'status_message'
    >
  >;
  private readonly twinsOf: Statement<[string, number], TwinRow>;
  private readonly demote: Statement;

  constructor(db: Database) {
    this.twinsOf = db.prepare(TWINS_QUERY);
    this.demote = db.prepare(`UPDATE spans SET category = 'other', response_id = NULL,
      attributes = json_set(attributes, '$."lightning.same_call_as"', ?) WHERE rollout = ? AND span_id = ?`);
    // Spans name their rollout by its integer key, seq (migration 12): read here with the counters.
    this.counters = db.prepare('SELECT seq, span_count, attempt_count, status FROM rollouts WHERE id = ?');
    this.insert = db.prepare(`INSERT INTO spans
      (rollout, attempt, sequence, trace_id, span_id, parent_span_id, name, kind, category, start_ms, end_ms,
       status_code, status_message, attributes, events, prompt_tokens, completion_tokens, response_id)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (rollout, span_id) DO NOTHING`);
    this.bump = db.prepare(`UPDATE rollouts SET span_count = span_count + ?, llm_calls = llm_calls + ?,
      prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, updated_at = ? WHERE seq = ?`);
    const ofRollout =
      'SELECT r.id AS rollout_id, s.* FROM rollouts r CROSS JOIN spans s ON s.rollout = r.seq WHERE r.id = ?';
    this.ofRollout = db.prepare(`${ofRollout} ORDER BY s.sequence`);
    this.after = db.prepare(`${ofRollout} AND s.sequence > ? ORDER BY s.sequence LIMIT ?`);
    // Only the rollout's last attempt: the calls of a failed attempt are not the trajectory that earned the reward.
    this.forTraining =
      // The status message of an error only: a record made before calls carried their outcome says "cancelled" there.
      db.prepare(`SELECT r.id AS rollout_id, s.span_id, s.parent_span_id, s.trace_id, s.sequence, s.category, s.start_ms, s.end_ms, s.attributes, s.name, s.status_code,
        CASE WHEN s.status_code = 'error' THEN s.status_message END AS status_message
      FROM json_each(?) j CROSS JOIN rollouts r ON r.id = j.value CROSS JOIN spans s ON s.rollout = r.seq
      WHERE s.attempt = r.attempt_count`);
  }

  /**
   * Stores each batch; must run inside a transaction. A batch refused before any of it was written (add's errors) has
   * that error as its outcome, and the others go on.
   */
  addEach(batches: readonly SpanBatch[], now: number): Array<SpanBatchOutcome | NotFoundError | OverloadedError> {
    return batches.map((batch) => {
      try {
        return this.add(batch, now);
      } catch (error) {
        if (error instanceof NotFoundError || error instanceof OverloadedError) return error;
        throw error;
      }
    });
  }

  /**
   * Stores one rollout's spans; must run inside a transaction. Throws, having written nothing, for an unknown rollout
   * (NotFoundError) and for prepared spans scrubbed without a secret known now (OverloadedError: retry).
   */
  add(batch: SpanBatch, now = Date.now()): SpanBatchOutcome {
    const counters = this.counters.get(batch.rolloutId);
    if (!counters) throw new NotFoundError(`rollout ${batch.rolloutId} does not exist; spans need an existing rollout`);
    let sequence = counters.span_count;
    let llmCalls = 0;
    let promptTokens = 0;
    let completionTokens = 0;
    const results: StoredSpanResult[] = [];
    const stored: StoredSpanRef[] = [];
    const attempt = batch.attempt ?? counters.attempt_count;
    const late = batch.attempt === undefined ? null : lateness(batch.attempt, counters);
    const lacking = lackingSecrets(batch.rolloutId);
    // The one door into the table: whatever made the span, secrets and oversize parts stop here. An OTLP span comes
    // scrubbed by its decode worker: it is written only if that scrub knew every secret known for the rollout now.
    const spans = batch.spans.map((given) => {
      let span: PreparedSpan;
      if (!isPrepared(given)) span = prepareSpan(scrubSpan(given, batch.rolloutId), secretsOf(batch.rolloutId));
      else if (lacking(given.scrubbedWith).length === 0) span = given;
      else
        throw new OverloadedError(
          `rollout ${batch.rolloutId} learned a secret value while these spans were decoded; nothing was written, and a retry scrubs them with it`,
        );
      return late === null ? span : markedLate(span, late);
    });
    const twins = this.twinsFor(counters.seq, spans);
    for (const prepared of spans) {
      const { span, replaced, pairedWith } = pairWithTwin(twins, prepared);
      const responseId = span.responseId;
      const info = this.insert.run(
        counters.seq,
        attempt,
        sequence + 1,
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
        responseId,
      );
      if (info.changes === 0) {
        results.push({ kind: 'duplicate', spanId: span.spanId });
        continue;
      }
      if (pairedWith) pairedWith.paired = 1;
      if (replaced) {
        // The twin stops being the step: its call and tokens are this span's now.
        this.demote.run(span.spanId, counters.seq, replaced.span_id);
        twins.set(
          replaced.response_id,
          twins.get(replaced.response_id)!.filter((row) => row !== replaced),
        );
        llmCalls -= 1;
        promptTokens -= replaced.prompt_tokens ?? 0;
        completionTokens -= replaced.completion_tokens ?? 0;
      }
      if (responseId !== null) {
        const row = {
          response_id: responseId,
          span_id: span.spanId,
          proxied: span.proxied ? 1 : 0,
          paired: replaced ? 1 : 0,
          prompt_tokens: span.promptTokens,
          completion_tokens: span.completionTokens,
          trace_id: span.traceId,
          start_ms: span.startMs,
          end_ms: span.endMs,
        };
        const list = twins.get(responseId);
        if (list) list.push(row);
        else twins.set(responseId, [row]);
      }
      sequence += 1;
      if (span.category === 'llm') {
        llmCalls += 1;
        promptTokens += span.promptTokens ?? 0;
        completionTokens += span.completionTokens ?? 0;
      }
      results.push({ kind: 'stored', spanId: span.spanId, sequence });
      stored.push({ rolloutId: batch.rolloutId, sequence });
    }
    if (stored.length > 0) {
      this.bump.run(stored.length, llmCalls, promptTokens, completionTokens, now, counters.seq);
    }
    return { results, stored };
  }

  /** The stored LLM spans sharing a response id with the batch's, by response id, in order of arrival. */
  private twinsFor(rollout: number, spans: readonly PreparedSpan[]): Map<string, TwinRow[]> {
    const ids = new Set<string>();
    for (const span of spans) if (span.responseId !== null) ids.add(span.responseId);
    const twins = new Map<string, TwinRow[]>();
    if (ids.size === 0) return twins;
    for (const row of this.twinsOf.all(JSON.stringify([...ids]), rollout)) {
      const list = twins.get(row.response_id);
      if (list) list.push(row);
      else twins.set(row.response_id, [row]);
    }
    return twins;
  }

  list(rolloutId: string): Span[] {
    return this.ofRollout.all(rolloutId).map(rowToSpan);
  }

  /** A page of a rollout's spans after a sequence number (a live view catching up). */
  listAfter(rolloutId: string, afterSequence: number, limit: number): Span[] {
    return this.after.all(rolloutId, afterSequence, limit).map(rowToSpan);
  }

  /**
   * What LightningRL reads of many rollouts' spans (their last attempt), in one query: the tree, the order, the
   * attributes, the status (an error's message) — not events or token columns (reading fewer columns is ~4× faster).
   */
  listForTraining(rolloutIds: readonly string[]): Map<string, TrainingSpan[]> {
    const byRollout = new Map<string, TrainingSpan[]>(rolloutIds.map((id) => [id, []]));
    for (const row of this.forTraining.all(JSON.stringify(rolloutIds))) {
      byRollout.get(row.rollout_id)!.push({
        spanId: row.span_id,
        parentSpanId: row.parent_span_id,
        traceId: row.trace_id,
        sequence: row.sequence,
        category: row.category,
        startMs: row.start_ms,
        endMs: row.end_ms,
        attributes: JSON.parse(row.attributes) as Record<string, Json>,
        name: row.name,
        statusCode: row.status_code,
        statusMessage: row.status_message,
      });
    }
    for (const spans of byRollout.values()) spans.sort((a, b) => a.sequence - b.sequence);
    return byRollout;
  }
}
