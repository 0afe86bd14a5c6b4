// needs: venv
/**
 * Training data you can trust (README): real SDKs against an upstream that answers 429 then 200,
 * 500 then 200, a stream the client cancels, a stream past the size limit. Each call's record says
 * how it ended and which attempt a retry repeats; both exports hold exactly the whole answers and
 * say on stderr what they left out; `--include-failed` keeps the rest, flagged.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { runCli } from '../helpers/daemon';
import { startFaultyUpstream, LONG_STREAM_CHARS, type FaultyUpstream } from '../helpers/faultyUpstream';
import { AGENTS, ANTHROPIC_KEY, python } from '../helpers/providerAgents';
import { runAgent, type AgentRun } from '../helpers/runAgent';
import { ANSWER, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { PROVIDER_ANSWER } from '../helpers/scriptedProviders';

let scripted: ScriptedUpstream;
let upstream: FaultyUpstream;
before(async () => {
  scripted = await startScriptedUpstream();
  upstream = await startFaultyUpstream(scripted);
});
after(async () => {
  await upstream.close();
  await scripted.close();
});

const llmOf = (run: AgentRun): Span[] => run.detail.spans.filter((s) => s.category === 'llm').sort((a, b) => a.sequence - b.sequence);
const modelOf = (span: Span): unknown => (span.attributes['lightning.request'] as { model?: unknown }).model;

interface Exported {
  readonly rows: Array<Record<string, unknown>>;
  readonly summary: Record<string, unknown>;
  readonly stderr: string;
}

async function exportRows(run: AgentRun, format: 'transitions' | 'chat', extra: string[] = []): Promise<Exported> {
  const out = path.join(run.cwd, `${format}${extra.length ? '-all' : ''}.jsonl`);
  const result = await runCli(['export', '--format', format, '--missing-reward', 'fill', '--out', out, ...extra], { cwd: run.cwd });
  assert.equal(result.code, 0, result.stderr);
  const text = fs.readFileSync(out, 'utf8');
  return { rows: text.split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>), summary: JSON.parse(result.stdout) as Record<string, unknown>, stderr: result.stderr };
}

describe('LLM call outcomes: recorded, shown, and kept out of training', () => {
  test('openai (Node): 429 → retry, 500 → retry, a cancelled stream, a stream past the limit, a plain call', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-openai-agent.mjs')]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWERS: ${ANSWER} \\| ${ANSWER} \\| ${ANSWER} \\| long ${LONG_STREAM_CHARS}`), 'the agent got every byte, the long stream whole');
    await upstream.cancelled;
    const llm = llmOf(run);
    const byModel = (model: string): Span[] => llm.filter((s) => modelOf(s) === model);
    assert.equal(llm.length, 7, 'two attempts each for the 429 and the 500, then three calls');

    const [rateLimited, afterRateLimit] = byModel('flaky-429');
    assert.deepEqual(spanOutcome(rateLimited!), { kind: 'upstream_error', status: 429 });
    assert.deepEqual(spanOutcome(afterRateLimit!), { kind: 'ok' });
    assert.equal(afterRateLimit!.attributes['lightning.retry_of'], rateLimited!.spanId, 'the retry names the attempt it repeats');
    assert.equal(afterRateLimit!.attributes['lightning.sdk_retry_count'], 1);
    assert.equal(rateLimited!.attributes['lightning.retry_of'], undefined);

    const [serverError, afterServerError] = byModel('flaky-500');
    assert.deepEqual(spanOutcome(serverError!), { kind: 'upstream_error', status: 500 });
    assert.equal(afterServerError!.attributes['lightning.retry_of'], serverError!.spanId);

    const [cancelled] = byModel('cancel-stream');
    assert.deepEqual(spanOutcome(cancelled!), { kind: 'cancelled' });
    const [long] = byModel('long-stream');
    assert.deepEqual(spanOutcome(long!), { kind: 'truncated', limit: 'stream_content' });
    assert.ok(String((long!.attributes['lightning.response'] as { lightning_truncated?: unknown }).lightning_truncated).includes('size limit'));
    assert.deepEqual(spanOutcome(byModel('test-model')[0]!), { kind: 'ok' });

    // `lightning show` says it in words.
    const shown = await runCli(['show', run.last.id], { cwd: run.cwd });
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /HTTP 429/);
    assert.match(shown.stdout, new RegExp(`retry of #${rateLimited!.sequence}\\b`));
    assert.match(shown.stdout, new RegExp(`retry of #${serverError!.sequence}\\b`));
    assert.match(shown.stdout, /cancelled/);
    assert.match(shown.stdout, /truncated \(stream content limit\)/);

    const whole = [afterRateLimit!, afterServerError!, byModel('test-model')[0]!].map((s) => s.spanId).sort();
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
      assert.deepEqual(messages.at(-1), { role: 'assistant', content: ANSWER }, 'every chat row ends in a whole answer');
      assert.equal(row.outcome, undefined);
    }
    assert.match(chat.stderr, skippedLine);

    const everything = await exportRows(run, 'transitions', ['--include-failed']);
    assert.equal(everything.rows.length, 7);
    const flagged = everything.rows.filter((row) => row.outcome !== undefined).map((row) => (row.outcome as { kind: string }).kind).sort();
    assert.deepEqual(flagged, ['cancelled', 'truncated', 'upstream_error', 'upstream_error']);
    assert.doesNotMatch(everything.stderr, /skipped:/);
    const everyChat = await exportRows(run, 'chat', ['--include-failed']);
    // The error attempts have no reply to make a chat row of (an error body is never read as an answer).
    assert.deepEqual(everyChat.rows.filter((row) => row.outcome !== undefined).map((row) => (row.outcome as { kind: string }).kind).sort(), ['cancelled', 'truncated']);
    assert.equal(everyChat.summary.skippedNotChat, 2);
  });

  test('@anthropic-ai/sdk (Node, streaming): 500 → retry; the error body is not an answer', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs')], { ANTHROPIC_BASE_URL: upstream.origin, ANTHROPIC_API_KEY: ANTHROPIC_KEY });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.equal(llmOf(run).length, 2);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 500 });
    assert.equal((failed!.attributes['lightning.response'] as { type?: unknown }).type, 'error', 'the record keeps the error body as it came');
    assert.deepEqual(spanOutcome(retry!), { kind: 'ok' });
    assert.equal(retry!.attributes['lightning.retry_of'], failed!.spanId);
    const chat = await exportRows(run, 'chat');
    assert.equal(chat.rows.length, 1);
    assert.deepEqual((chat.rows[0]!.messages as unknown[]).at(-1), { role: 'assistant', content: PROVIDER_ANSWER });
    assert.match(chat.stderr, /skipped: 1 upstream error\b/);
    const everyChat = await exportRows(run, 'chat', ['--include-failed']);
    assert.equal(everyChat.rows.length, 1, 'no empty assistant reply is made of the error');
  });

  test('@anthropic-ai/sdk under --token-ids (answered through chat completions): 500 → retry, linked the same way', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs')], { ANTHROPIC_BASE_URL: '', ANTHROPIC_API_KEY: '', AGENT_MODEL: 'flaky-500-translated' }, ['--token-ids']);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.equal(llmOf(run).length, 2);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 500 });
    assert.equal(failed!.attributes['lightning.response'], undefined, 'no answer is made of the error');
    assert.deepEqual(spanOutcome(retry!), { kind: 'ok' });
    assert.equal(retry!.attributes['lightning.retry_of'], failed!.spanId);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(transitions.rows.map((row) => row.spanId), [retry!.spanId]);
    assert.deepEqual(transitions.rows[0]!.responseTokenIds, [4, 5]);
    assert.match(transitions.stderr, /skipped: 1 upstream error\b/);
  });

  test('Python anthropic SDK: 429 → retry', async (t) => {
    const run = await runAgent(t, upstream.url, [python(), path.join(AGENTS, 'faulty_anthropic_agent.py')], { ANTHROPIC_BASE_URL: upstream.origin, ANTHROPIC_API_KEY: ANTHROPIC_KEY });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 429 });
    assert.equal(retry!.attributes['lightning.retry_of'], failed!.spanId);
    assert.equal(retry!.attributes['lightning.sdk_retry_count'], 1);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(transitions.rows.map((row) => row.spanId), [retry!.spanId]);
    assert.match(transitions.stderr, /skipped: 1 upstream error\b/);
  });
});
