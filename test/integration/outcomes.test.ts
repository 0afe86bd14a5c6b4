// needs: venv
/**
 * Training data you can trust (README): real SDKs against an upstream that answers 429 then 200,
 * 500 then 200, a stream the client cancels, a stream past the size limit. Each call's record says
 * how it ended and which attempt a retry repeats; both exports hold exactly the whole answers and
 * say on stderr what they left out; `--include-failed` keeps the rest, flagged.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { spanOutcome } from '../../trainer-daemon/protocol';
import { startFaultyUpstream, type FaultyUpstream } from '../helpers/faultyUpstream';
import { assertFaultyRun, exportRows, llmOf } from '../helpers/outcomeChecks';
import { AGENTS, ANTHROPIC_KEY, python } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
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

describe('LLM call outcomes: recorded, shown, and kept out of training', () => {
  test('openai (Node): 429 → retry, 500 → retry, a cancelled stream, a stream past the limit, a plain call', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-openai-agent.mjs')]);
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: ANSWER, plainModel: 'test-model', countsRetries: true });
  });

  test('@anthropic-ai/sdk (Node, streaming): 500 → retry; the error body is not an answer', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs')], {
      ANTHROPIC_BASE_URL: upstream.origin,
      ANTHROPIC_API_KEY: ANTHROPIC_KEY,
    });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.equal(llmOf(run).length, 2);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 500 });
    assert.equal(
      (failed!.attributes['lightning.response'] as { type?: unknown }).type,
      'error',
      'the record keeps the error body as it came',
    );
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
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs')],
      { ANTHROPIC_BASE_URL: '', ANTHROPIC_API_KEY: '', AGENT_MODEL: 'flaky-500-translated' },
      ['--token-ids'],
    );
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.equal(llmOf(run).length, 2);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 500 });
    assert.equal(failed!.attributes['lightning.response'], undefined, 'no answer is made of the error');
    assert.deepEqual(spanOutcome(retry!), { kind: 'ok' });
    assert.equal(retry!.attributes['lightning.retry_of'], failed!.spanId);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(
      transitions.rows.map((row) => row.spanId),
      [retry!.spanId],
    );
    assert.deepEqual(transitions.rows[0]!.responseTokenIds, [4, 5]);
    assert.match(transitions.stderr, /skipped: 1 upstream error\b/);
  });

  test('Python anthropic SDK: 429 → retry', async (t) => {
    const run = await runAgent(t, upstream.url, [python(), path.join(AGENTS, 'faulty_anthropic_agent.py')], {
      ANTHROPIC_BASE_URL: upstream.origin,
      ANTHROPIC_API_KEY: ANTHROPIC_KEY,
    });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
    const [failed, retry] = llmOf(run);
    assert.deepEqual(spanOutcome(failed!), { kind: 'upstream_error', status: 429 });
    assert.equal(retry!.attributes['lightning.retry_of'], failed!.spanId);
    assert.equal(retry!.attributes['lightning.sdk_retry_count'], 1);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(
      transitions.rows.map((row) => row.spanId),
      [retry!.spanId],
    );
    assert.match(transitions.stderr, /skipped: 1 upstream error\b/);
  });
});
