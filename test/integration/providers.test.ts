/**
 * Agents on the Anthropic and Gemini JS SDKs, unchanged, through `lightning run` against a scripted
 * upstream speaking each API: every call is one `llm` span, JSON and streaming, tools, thinking,
 * errors in the provider's shape, keys forwarded and never stored; constant response ids.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { asChatCall } from '../../trainer-daemon/protocol';
import { llmCallView } from '../../trainer-daemon/protocol/ui/rolloutText';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import {
  AGENTS,
  ANTHROPIC_KEY,
  GEMINI_KEY,
  anthropicEnv,
  assertAnthropicTrajectory,
  assertGeminiTrajectory,
  assertNotStored,
  geminiEnv,
  llmOf,
  type Obj,
} from '../helpers/providerAgents';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

describe('Anthropic SDK agents, unchanged, through lightning run', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`@anthropic-ai/sdk (${mode}): tools, system blocks with cache_control, an image; headers forwarded, the key never stored`, async (t) => {
      const seen = upstream.requests.length;
      const run = await runAgent(
        t,
        upstream.url,
        ['node', path.join(AGENTS, 'anthropic-agent.mjs'), mode, 'count'],
        anthropicEnv(upstream),
      );
      assertAnthropicTrajectory(run, mode === 'stream');
      assert.match(run.stdout, /COUNT: 42 MODELS: claude-test/, 'count_tokens and models pass through');
      const first = llmOf(run)[0]!;
      const request = first.attributes['lightning.request'] as Obj;
      assert.deepEqual((request.system as Obj[])[0]!.cache_control, { type: 'ephemeral' });
      assert.equal(((request.messages as Obj[])[0]!.content as Obj[])[1]!.type, 'image');
      assert.equal(((first.attributes['lightning.response'] as Obj).content as Obj[])[0]!.type, 'tool_use');
      assert.deepEqual(
        ((first.attributes['lightning.response'] as Obj).content as Obj[])[0]!.input,
        { city: 'Paris' },
        'streamed tool input reassembled',
      );
      const calls = upstream.requests.slice(seen).filter((r) => r.path.startsWith('/v1/messages'));
      assert.deepEqual(
        calls.map((r) => r.path),
        ['/v1/messages/count_tokens', '/v1/messages', '/v1/messages'],
      );
      for (const call of calls) {
        // The Python SDK sends x-api-key; this JS SDK version sends the key as a bearer token: both are forwarded.
        assert.equal(call.headers['x-api-key'] ?? call.headers.authorization?.replace(/^Bearer /, ''), ANTHROPIC_KEY);
        assert.ok(call.headers['anthropic-version'], 'anthropic-version forwarded');
        assert.equal(call.headers['anthropic-beta'], 'test-beta-2025');
      }
      assert.equal(run.detail.spans.length, 2, 'count_tokens and models are not LLM calls');
      assertNotStored(run, ANTHROPIC_KEY);
    });
  }

  test('thinking and redacted thinking are recorded, shown collapsed in the panel, kept out of the answer', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'stream'], {
      ...anthropicEnv(upstream),
      AGENT_MODEL: 'claude-thinking',
    });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const first = llmOf(run)[0]!;
    const blocks = (first.attributes['lightning.response'] as Obj).content as Obj[];
    assert.deepEqual(
      blocks.map((b) => b.type),
      ['thinking', 'redacted_thinking', 'tool_use'],
    );
    assert.equal(blocks[0]!.signature, 'sig-abc', 'signature_delta reassembled');
    const view = llmCallView(first);
    assert.match(view.response!.thinking!, /I should use the tool\.\n\[redacted thinking\]/);
    assert.deepEqual(view.response!.toolCalls, [{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    assert.equal(view.response!.content, '');
    assert.deepEqual(view.tools, ['get_weather']);
  });

  test("errors: the upstream's in Anthropic's shape pass through; the daemon's own are in that shape too; each call recorded", async (t) => {
    const failed = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'json'], {
      ...anthropicEnv(upstream),
      AGENT_MODEL: 'fail-500',
    });
    assert.equal(failed.code, 3);
    assert.match(failed.stdout, /ERROR: 500 InternalServerError .*the model is overloaded/);
    const [span] = llmOf(failed);
    assert.equal(span!.statusCode, 'error');
    assert.match(span!.statusMessage!, /upstream HTTP 500: the model is overloaded/);

    const midStream = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'stream'], {
      ...anthropicEnv(upstream),
      AGENT_MODEL: 'stream-error',
    });
    assert.equal(midStream.code, 3);
    assert.match(midStream.stdout, /ERROR: .*Overloaded/);
    const streamed = llmOf(midStream).at(-1)!;
    assert.equal(streamed.statusCode, 'error');
    assert.match(streamed.statusMessage!, /overloaded_error: Overloaded/);
    // The error event stays in the record as it came, and the call is not a whole answer: no chat row is made of it.
    assert.equal(streamed.attributes['lightning.outcome'], 'upstream_error');
    assert.deepEqual((streamed.attributes['lightning.response'] as Obj).error, {
      type: 'overloaded_error',
      message: 'Overloaded',
    });
    assert.equal(asChatCall(streamed.attributes).response, null);

    const unreachable = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'json'], {
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:1',
      ANTHROPIC_API_KEY: ANTHROPIC_KEY,
    });
    assert.equal(unreachable.code, 3);
    assert.match(
      unreachable.stdout,
      /ERROR: 502 InternalServerError .*Lightning could not get a response from the upstream http:\/\/127\.0\.0\.1:1/,
    );
    assert.equal(llmOf(unreachable)[0]!.statusCode, 'error');
  });
});

describe('Gemini SDK agents, unchanged, through lightning run', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`@google/genai (${mode})`, async (t) => {
      const run = await runAgent(
        t,
        upstream.url,
        ['node', path.join(AGENTS, 'gemini-agent.mjs'), mode],
        geminiEnv(upstream),
      );
      assertGeminiTrajectory(upstream, run, mode === 'stream');
    });
  }

  test('a key in the query (`?key=`) is forwarded and never stored', async (t) => {
    const script = `const r = await fetch(process.env.LIGHTNING_URL + '/v1beta/models/gemini-test:generateContent?key=${GEMINI_KEY}', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }) }); console.log('STATUS', r.status);`;
    const run = await runAgent(t, upstream.url, ['node', '--input-type=module', '-e', script], {
      GOOGLE_GEMINI_BASE_URL: upstream.origin,
      GEMINI_API_KEY: '',
    });
    assert.match(run.stdout, /STATUS 200/);
    assert.equal(upstream.requests.at(-1)!.path, `/v1beta/models/gemini-test:generateContent?key=${GEMINI_KEY}`);
    assert.equal(llmOf(run).length, 1);
    assertNotStored(run, GEMINI_KEY);
  });

  test('streamGenerateContent without alt=sse (one JSON array) is recorded as the merged response', async (t) => {
    const script = `const r = await fetch(process.env.LIGHTNING_URL + '/v1beta/models/gemini-test:streamGenerateContent', { method: 'POST', headers: { 'content-type': 'application/json', 'x-goog-api-key': 'k' }, body: JSON.stringify({ contents: 'hi' }) }); const chunks = await r.json(); console.log('CHUNKS', chunks.length);`;
    const run = await runAgent(t, upstream.url, ['node', '--input-type=module', '-e', script], {
      GOOGLE_GEMINI_BASE_URL: upstream.origin,
    });
    assert.match(run.stdout, /CHUNKS 5/, 'the agent gets the array unchanged');
    const [span] = llmOf(run);
    assert.equal(span!.attributes['lightning.streamed'], true);
    const candidate = ((span!.attributes['lightning.response'] as Obj).candidates as Obj[])[0]!;
    assert.deepEqual((candidate.content as Obj).parts, [{ text: 'It is sunny in Paris.' }]);
    assert.equal(span!.attributes['gen_ai.usage.output_tokens'], 7);
  });

  test("an upstream error in Google's shape reaches the SDK and the call is recorded as failed", async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'gemini-agent.mjs'), 'json'], {
      ...geminiEnv(upstream),
      AGENT_MODEL: 'fail-500',
    });
    assert.equal(run.code, 3);
    assert.match(run.stdout, /ERROR: 500 .*the model is overloaded/);
    assert.equal(llmOf(run)[0]!.statusCode, 'error');
  });
});

describe('constant response ids', () => {
  const cases = [
    ['chat completions', ['node', path.join(AGENTS, 'openai-agent.mjs'), 'chat'], {}],
    ['responses', ['node', path.join(AGENTS, 'openai-agent.mjs'), 'responses'], {}],
    ['messages', ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'json'], { ANTHROPIC_BASE_URL: '' }],
  ] as const;
  for (const [name, command, env] of cases) {
    test(`${name}: two calls answered with the same id are two steps`, async (t) => {
      const run = await runAgent(t, upstream.url, [...command], {
        ...anthropicEnv(upstream),
        LIGHTNING_ANTHROPIC_UPSTREAM_URL: upstream.origin,
        ...env,
        AGENT_MODEL: name === 'messages' ? 'claude-constant-id' : 'constant-id',
      });
      assert.equal(run.code, 0, run.stdout + run.stderr);
      const llm = llmOf(run);
      assert.equal(
        llm.length,
        2,
        JSON.stringify(run.detail.spans.map((s) => [s.category, s.attributes['lightning.same_call_as']])),
      );
      assert.equal(new Set(llm.map((s) => s.attributes['gen_ai.response.id'])).size, 1, 'the same id');
      assert.equal(run.detail.rollout.llmCalls, 2);
    });
  }
});
