// needs: venv
/**
 * Only whole answers train (docs/export.md): real SDKs against an upstream that answers 429 then 200,
 * 500 then 200, a stream the client cancels, a stream past the size limit. Each call's record says
 * how it ended and which attempt a retry repeats; both exports hold exactly the whole answers and
 * say on stderr what they left out; `--include-failed` keeps the rest, flagged. Here: `openai` and
 * Anthropic's SDKs, Node and Python (outcomesSdks.test.ts has the others).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { startFaultyUpstream, type FaultyUpstream } from '../helpers/faultyUpstream';
import { assertFaultyRun, exportRows, llmOf, modelOf } from '../helpers/outcomeChecks';
import { AGENTS, ANTHROPIC_KEY, assertNotStored, python } from '../helpers/providerAgents';
import { runAgent, type AgentRun } from '../helpers/runAgent';
import { ANSWER, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { PROVIDER_ANSWER } from '../helpers/scriptedProviders';

let scripted: ScriptedUpstream;
before(async () => (scripted = await startScriptedUpstream()));
after(() => scripted.close());

/** A faulty upstream of the test's own: each fails a model's first call once, so SDKs must not share one. */
async function faulty(t: TestContext): Promise<FaultyUpstream> {
  const upstream = await startFaultyUpstream(scripted);
  t.after(() => upstream.close());
  return upstream;
}

const anthropic = (upstream: FaultyUpstream): NodeJS.ProcessEnv => ({
  ANTHROPIC_BASE_URL: upstream.origin,
  ANTHROPIC_API_KEY: ANTHROPIC_KEY,
});

/** The Anthropic error attempts: recorded with the error body as it came, never read as an answer. */
function assertErrorBodiesKept(run: AgentRun): void {
  const failed = llmOf(run).filter((span: Span) => spanOutcome(span).kind === 'upstream_error');
  assert.deepEqual(failed.map(modelOf), ['flaky-429', 'flaky-500']);
  for (const span of failed)
    assert.equal(
      (span.attributes['lightning.response'] as { type?: unknown }).type,
      'error',
      'the record keeps the error body as it came',
    );
  assertNotStored(run, ANTHROPIC_KEY);
}

describe('LLM call outcomes: recorded, shown, and kept out of training', () => {
  test('openai (Node): 429 → retry, 500 → retry, a cancelled stream, a stream past the limit, a plain call', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-openai-agent.mjs')]);
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: ANSWER, plainModel: 'test-model', countsRetries: true });
  });

  test('@anthropic-ai/sdk (Node): 429 → retry, 500 → retry (streamed), a stream left early, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs')],
      anthropic(upstream),
    );
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'claude-test', countsRetries: true });
    assertErrorBodiesKept(run);
  });

  test('@anthropic-ai/sdk under --token-ids (answered through chat completions): 500 → retry, linked the same way', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'faulty-anthropic-agent.mjs'), 'once'],
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

  test('Python anthropic: 429 → retry, 500 → retry, a stream closed early, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      [python(), path.join(AGENTS, 'faulty_anthropic_agent.py')],
      anthropic(upstream),
    );
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'claude-test', countsRetries: true });
    assertErrorBodiesKept(run);
  });
});
