/**
 * What every SDK's run through the faulty upstream (faultyUpstream.ts) must leave: a 429 and a 500 attempt each
 * followed by its retry (linked), a cancelled stream, a stream truncated at the content limit, a plain call;
 * `lightning show` saying so in words; both exports holding exactly the three whole answers and saying on stderr
 * what they left out; `--include-failed` keeping the rest, flagged.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { runCli } from './daemon';
import { LONG_STREAM_CHARS } from './faultyUpstream';
import type { AgentRun } from './runAgent';

export const llmOf = (run: AgentRun): Span[] =>
  run.detail.spans.filter((s) => s.category === 'llm').sort((a, b) => a.sequence - b.sequence);
/** The model a call asked for: the body's `model`, or Gemini's path (the record's gen_ai.request.model). */
export const modelOf = (span: Span): unknown =>
  (span.attributes['lightning.request'] as { model?: unknown }).model ?? span.attributes['gen_ai.request.model'];

export interface Exported {
  readonly rows: Array<Record<string, unknown>>;
  readonly summary: Record<string, unknown>;
  readonly stderr: string;
}

export async function exportRows(
  run: AgentRun,
  format: 'transitions' | 'chat',
  extra: string[] = [],
): Promise<Exported> {
  const out = path.join(run.cwd, `${format}${extra.length ? '-all' : ''}.jsonl`);
  const result = await runCli(['export', '--format', format, '--missing-reward', 'fill', '--out', out, ...extra], {
    cwd: run.cwd,
  });
  assert.equal(result.code, 0, result.stderr);
  const text = fs.readFileSync(out, 'utf8');
  return {
    rows: text
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>),
    summary: JSON.parse(result.stdout) as Record<string, unknown>,
    stderr: result.stderr,
  };
}

export interface FaultyRunExpectations {
  /** The scripted upstream's answer to a plain call in this API. */
  readonly answer: string;
  /** The model name of the plain call. */
  readonly plainModel: string;
  /** Whether the SDK says in a header which retry a request is (x-stainless-retry-count). */
  readonly countsRetries: boolean;
}

/** The record, `lightning show` and both exports of a run of a faulty-* agent. */
export async function assertFaultyRun(run: AgentRun, expected: FaultyRunExpectations): Promise<void> {
  const { answer } = expected;
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.ok(
    run.stdout.includes(`ANSWERS: ${answer} | ${answer} | ${answer} | long ${LONG_STREAM_CHARS}`),
    `the agent got every byte, the long stream whole: ${run.stdout}`,
  );
  const llm = llmOf(run);
  const byModel = (model: string): Span[] => llm.filter((s) => modelOf(s) === model);
  assert.equal(
    llm.length,
    7,
    `two attempts each for the 429 and the 500, then three calls: ${llm.map(modelOf).join(', ')}`,
  );

  const [rateLimited, afterRateLimit] = byModel('flaky-429');
  assert.deepEqual(spanOutcome(rateLimited!), { kind: 'upstream_error', status: 429 });
  assert.deepEqual(spanOutcome(afterRateLimit!), { kind: 'ok' });
  assert.equal(
    afterRateLimit!.attributes['lightning.retry_of'],
    rateLimited!.spanId,
    'the retry names the attempt it repeats',
  );
  if (expected.countsRetries) assert.equal(afterRateLimit!.attributes['lightning.sdk_retry_count'], 1);
  assert.equal(rateLimited!.attributes['lightning.retry_of'], undefined);

  const [serverError, afterServerError] = byModel('flaky-500');
  assert.deepEqual(spanOutcome(serverError!), { kind: 'upstream_error', status: 500 });
  assert.equal(afterServerError!.attributes['lightning.retry_of'], serverError!.spanId);

  assert.deepEqual(spanOutcome(byModel('cancel-stream')[0]!), { kind: 'cancelled' });
  const [long] = byModel('long-stream');
  assert.deepEqual(spanOutcome(long!), { kind: 'truncated', limit: 'stream_content' });
  const plain = byModel(expected.plainModel)[0]!;
  assert.deepEqual(spanOutcome(plain), { kind: 'ok' });

  const shown = await runCli(['show', run.last.id], { cwd: run.cwd });
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /HTTP 429/);
  assert.match(shown.stdout, new RegExp(`retry of #${rateLimited!.sequence}\\b`));
  assert.match(shown.stdout, new RegExp(`retry of #${serverError!.sequence}\\b`));
  assert.match(shown.stdout, /cancelled/);
  assert.match(shown.stdout, /truncated \(stream content limit\)/);

  const whole = [afterRateLimit!, afterServerError!, plain].map((s) => s.spanId).sort();
  const skippedLine = /skipped: 2 upstream errors, 1 cancelled, 1 truncated/;
  const transitions = await exportRows(run, 'transitions');
  assert.deepEqual(transitions.rows.map((row) => row.spanId).sort(), whole, 'exactly the whole answers');
  assert.ok(transitions.rows.every((row) => row.outcome === undefined));
  assert.deepEqual(transitions.summary.skipped, { upstreamError: 2, cancelled: 1, truncated: 1 });
  assert.match(transitions.stderr, skippedLine);
  const chat = await exportRows(run, 'chat');
  assert.equal(chat.rows.length, 3);
  for (const row of chat.rows) {
    const messages = row.messages as Array<{ role: string; content: unknown }>;
    assert.deepEqual(messages.at(-1), { role: 'assistant', content: answer }, 'every chat row ends in a whole answer');
    assert.equal(row.outcome, undefined);
  }
  assert.match(chat.stderr, skippedLine);

  const everything = await exportRows(run, 'transitions', ['--include-failed']);
  assert.equal(everything.rows.length, 7);
  const flagged = everything.rows
    .filter((row) => row.outcome !== undefined)
    .map((row) => (row.outcome as { kind: string }).kind)
    .sort();
  assert.deepEqual(flagged, ['cancelled', 'truncated', 'upstream_error', 'upstream_error']);
  assert.doesNotMatch(everything.stderr, /skipped:/);
  const everyChat = await exportRows(run, 'chat', ['--include-failed']);
  // The error attempts have no reply to make a chat row of (an error body is never read as an answer).
  assert.deepEqual(
    everyChat.rows
      .filter((row) => row.outcome !== undefined)
      .map((row) => (row.outcome as { kind: string }).kind)
      .sort(),
    ['cancelled', 'truncated'],
  );
  assert.equal(everyChat.summary.skippedNotChat, 2);
}
