/**
 * Gemini sends function calls without ids, and one turn may call the same function twice: the real
 * `@google/genai` SDK and the Vercel AI SDK's `@ai-sdk/google` against the scripted upstream (`gemini-parallel`:
 * `get_weather` for Paris and Oslo in one turn). Each call gets a unique id by its position in the conversation,
 * the same in the record of the answer, in the next request's history and in both exports; the agent's
 * FunctionResponse parts are paired with the calls by order and name — and under `--token-ids`, the chat
 * completions the policy is sent pair each tool result with the id of its own call. (Python google-genai:
 * providersPythonGemini.test.ts.)
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { assertPaired, callIds, toolAnswers, RESULTS } from '../helpers/geminiToolIds';
import { AGENTS, GEMINI_KEY, geminiEnv, llmOf, type Obj } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const AGENT = path.join(AGENTS, 'gemini-agent.mjs');
const VERCEL = path.join(AGENTS, 'vercel-provider-agent.mjs');
const [PARIS, OSLO] = RESULTS;
/** How the chat view reads @ai-sdk/google's functionResponse parts (`{name, content}`). */
const VERCEL_RESULTS = ['Paris', 'Oslo'].map((city) =>
  JSON.stringify({ name: 'get_weather', content: `${city}: sunny, 24°C` }),
) as [string, string];

describe('Gemini: one function called twice in a turn', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`@google/genai (${mode}) against the Gemini API: ids by position, responses paired by order and name`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', AGENT, mode], {
        ...geminiEnv(upstream),
        AGENT_MODEL: 'gemini-parallel',
      });
      const [first] = llmOf(run).sort((a, b) => a.sequence - b.sequence);
      const parts = (((first!.attributes['lightning.response'] as Obj).candidates as Obj[])[0]!.content as Obj)
        .parts as Obj[];
      assert.deepEqual(
        parts,
        [
          { functionCall: { name: 'get_weather', args: { city: 'Paris' } } },
          { functionCall: { name: 'get_weather', args: { city: 'Oslo' } } },
        ],
        'the record is the answer as sent: no ids added',
      );
      // The answer is the conversation's second turn (index 1): its calls are call_1_0 and call_1_1.
      await assertPaired(run, { answer: ['call_1_0', 'call_1_1'] });
    });
  }

  test('@google/genai under --token-ids: the policy’s ids reach the agent, and its tool results are paired with them', async (t) => {
    const seen = upstream.requests.length;
    const run = await runAgent(
      t,
      upstream.url,
      ['node', AGENT, 'json'],
      { GOOGLE_GEMINI_BASE_URL: '', GEMINI_API_KEY: '', AGENT_MODEL: 'gemini-parallel' },
      ['--token-ids'],
    );
    await assertPaired(run, { answer: ['call_paris', 'call_oslo'] });
    const sent = upstream.requests.slice(seen).filter((r) => r.path === '/v1/chat/completions');
    assert.equal(sent.length, 2);
    const messages = sent[1]!.body!.messages as Obj[];
    assert.deepEqual(callIds(messages.find((m) => m.role === 'assistant')!), ['call_paris', 'call_oslo']);
    assert.deepEqual(
      toolAnswers(messages),
      [
        ['call_paris', PARIS],
        ['call_oslo', OSLO],
      ],
      'what the policy is sent (and trained on) pairs each result with its own call',
    );
  });
  for (const mode of ['json', 'stream'] as const) {
    test(`ai + @ai-sdk/google (${mode}), captured through the preload: the answer's calls by position, the history's by the ids the SDK sent back`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', VERCEL, 'google', mode], {
        GOOGLE_GENERATIVE_AI_API_KEY: GEMINI_KEY,
        GOOGLE_GEMINI_BASE_URL: '',
        LIGHTNING_GEMINI_UPSTREAM_URL: upstream.origin,
        AGENT_MODEL: 'gemini-parallel',
      });
      // The answer came without ids; the AI SDK made up its own and sent them back with the calls in the next
      // request, and its functionResponse parts name them: the history reads those, the answer's row its positions.
      const [, second] = llmOf(run).sort((a, b) => a.sequence - b.sequence);
      const model = ((second!.attributes['lightning.request'] as Obj).contents as Obj[])[1]!;
      const sent = (model.parts as Obj[]).map((part) => (part.functionCall as Obj).id as string);
      assert.equal(new Set(sent).size, 2, `two ids of the SDK's own: ${sent.join(', ')}`);
      await assertPaired(run, {
        answer: ['call_1_0', 'call_1_1'],
        history: sent as [string, string],
        results: VERCEL_RESULTS,
      });
    });
  }

  test('ai + @ai-sdk/google under --token-ids: the policy’s ids reach the SDK, and come back paired', async (t) => {
    const seen = upstream.requests.length;
    const run = await runAgent(
      t,
      upstream.url,
      ['node', VERCEL, 'google', 'json'],
      { GOOGLE_GENERATIVE_AI_API_KEY: GEMINI_KEY, GOOGLE_GEMINI_BASE_URL: '', AGENT_MODEL: 'gemini-parallel' },
      ['--token-ids'],
    );
    await assertPaired(run, { answer: ['call_paris', 'call_oslo'], results: VERCEL_RESULTS });
    const sent = upstream.requests.slice(seen).filter((r) => r.path === '/v1/chat/completions');
    assert.equal(sent.length, 2);
    assert.deepEqual(toolAnswers(sent[1]!.body!.messages as Obj[]), [
      ['call_paris', VERCEL_RESULTS[0]],
      ['call_oslo', VERCEL_RESULTS[1]],
    ]);
  });
});
