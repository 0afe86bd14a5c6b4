// needs: venv
/**
 * LLM call outcomes for the rest of the SDKs (outcomes.test.ts has openai and Anthropic's): `@google/genai`, the
 * Vercel AI SDK on `@ai-sdk/openai`, `@ai-sdk/anthropic` and `@ai-sdk/google`, Python `openai` and `google-genai`,
 * each against an upstream that answers 429 then 200, 500 then 200, a stream the client stops reading, a stream past
 * the size limit (faultyUpstream.ts). Each asserts the record, the outcome, `lightning show` and both exports row by
 * row (outcomeChecks.ts).
 */
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { startFaultyUpstream, type FaultyUpstream } from '../helpers/faultyUpstream';
import { assertFaultyRun } from '../helpers/outcomeChecks';
import { AGENTS, ANTHROPIC_KEY, GEMINI_KEY, assertNotStored, python } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
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

const gemini = (upstream: FaultyUpstream): NodeJS.ProcessEnv => ({
  GOOGLE_GEMINI_BASE_URL: upstream.origin,
  GEMINI_API_KEY: GEMINI_KEY,
  GOOGLE_API_KEY: '',
});

describe('LLM call outcomes with every SDK: recorded, shown, and kept out of training', () => {
  test('@google/genai (Node): retries by its retryOptions, a stream left early, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'faulty-gemini-agent.mjs')],
      gemini(upstream),
    );
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'gemini-test', countsRetries: false });
  });

  test('Vercel AI SDK (ai + @ai-sdk/openai, chat completions): its own retries, an aborted stream, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-vercel-ai-agent.mjs')]);
    await assertFaultyRun(run, { answer: ANSWER, plainModel: 'test-model', countsRetries: false });
  });

  test('Vercel AI SDK (ai + @ai-sdk/anthropic, no base URL of its own): its own retries, an aborted stream, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'faulty-vercel-ai-agent.mjs'), 'anthropic'],
      {
        ANTHROPIC_BASE_URL: '',
        ANTHROPIC_API_KEY: ANTHROPIC_KEY,
        LIGHTNING_ANTHROPIC_UPSTREAM_URL: upstream.origin,
      },
    );
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'claude-test', countsRetries: false });
    assertNotStored(run, ANTHROPIC_KEY);
  });

  test('Vercel AI SDK (ai + @ai-sdk/google, which reads no base-URL variable): captured through the preload, its own retries, an aborted stream, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'faulty-vercel-ai-agent.mjs'), 'google'], {
      GOOGLE_GENERATIVE_AI_API_KEY: GEMINI_KEY,
      GOOGLE_GEMINI_BASE_URL: '',
      LIGHTNING_GEMINI_UPSTREAM_URL: upstream.origin,
    });
    await upstream.cancelled;
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'gemini-test', countsRetries: false });
    assertNotStored(run, GEMINI_KEY);
  });

  test('Python openai: max_retries, a closed stream, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(t, upstream.url, [python(), path.join(AGENTS, 'faulty_provider_agents.py'), 'openai']);
    await assertFaultyRun(run, { answer: ANSWER, plainModel: 'test-model', countsRetries: true });
  });

  test('Python google-genai: HttpRetryOptions, a closed stream, a stream past the limit', async (t) => {
    const upstream = await faulty(t);
    const run = await runAgent(
      t,
      upstream.url,
      [python(), path.join(AGENTS, 'faulty_provider_agents.py'), 'gemini'],
      gemini(upstream),
    );
    await assertFaultyRun(run, { answer: PROVIDER_ANSWER, plainModel: 'gemini-test', countsRetries: false });
  });
});
