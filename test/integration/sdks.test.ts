import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Span } from '../../trainer-daemon/protocol';
import { REPO_ROOT } from '../helpers/daemon';
import { runAgent } from '../helpers/runAgent';
import { ANSWER, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';

const AGENTS = path.join(REPO_ROOT, 'test', 'fixtures', 'agents');
let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const apiOf = (span: Span): unknown => span.attributes['lightning.api'];
const toolCallOf = (span: Span): string => {
  const response = span.attributes['lightning.response'] as {
    choices?: Array<{ message: { tool_calls?: Array<{ function: { name: string; arguments: string } }> } }>;
    output?: Array<{ type: string; name: string; arguments: string }>;
  };
  const call =
    response.choices?.[0]?.message.tool_calls?.[0]?.function ??
    response.output?.find((item) => item.type === 'function_call');
  return call ? `${call.name}(${call.arguments})` : '';
};

/** What a user checks for a tool-using agent: two LLM calls in order, the tool call with its arguments, the answer. */
function assertWeatherTrajectory(llm: Span[], api: string): void {
  assert.equal(llm.length, 2, 'two LLM calls');
  assert.deepEqual(llm.map(apiOf), [api, api]);
  assert.deepEqual(
    llm.map((s) => s.attributes['lightning.call_index']),
    [1, 2],
  );
  assert.equal(toolCallOf(llm[0]!), 'get_weather({"city":"Paris"})');
  assert.ok(llm.every((s) => s.statusCode === 'ok'));
}

describe('agent SDKs, unchanged, through lightning run', () => {
  for (const mode of ['responses', 'chat', 'stream'] as const) {
    test(`@openai/agents (${mode === 'chat' ? 'chat completions' : mode === 'stream' ? 'responses, streaming' : 'responses'})`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-agents-agent.mjs'), mode]);
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
      const llm = run.detail.spans.filter((s) => s.category === 'llm');
      assertWeatherTrajectory(llm, mode === 'chat' ? 'chat.completions' : 'responses');
      assert.equal(llm[1]!.attributes['lightning.streamed'], mode === 'stream');
      assert.equal(run.detail.rollout.status, 'succeeded');
    });
  }

  test('LangChain ChatOpenAI in a LangGraph ReAct agent', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'langgraph-agent.mjs')]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
    const llm = run.detail.spans.filter((s) => s.category === 'llm');
    assertWeatherTrajectory(llm, 'chat.completions');
    const second = llm[1]!.attributes['lightning.request'] as { messages: Array<{ role: string }> };
    assert.deepEqual(
      second.messages.map((m) => m.role),
      ['user', 'assistant', 'tool'],
    );
  });

  test('Vercel AI SDK with experimental_telemetry: its OTLP spans join the proxy record, each LLM call counted once', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'vercel-ai-agent.mjs')]);
    assert.equal(run.code, 0, run.stderr);
    const byCategory = (category: string): Span[] => run.detail.spans.filter((s) => s.category === category);
    assertWeatherTrajectory(byCategory('llm'), 'chat.completions');
    assert.deepEqual(
      byCategory('agent').map((s) => s.name),
      ['ai.generateText'],
    );
    assert.deepEqual(
      byCategory('tool').map((s) => [s.name, s.attributes['ai.toolCall.name']]),
      [['ai.toolCall', 'get_weather']],
    );
    const twins = byCategory('other').filter((s) => s.name === 'ai.generateText.doGenerate');
    assert.equal(twins.length, 2, 'the SDK reports both calls too');
    const steps = new Set(byCategory('llm').map((s) => s.spanId));
    assert.ok(
      twins.every((s) => steps.has(String(s.attributes['lightning.same_call_as']))),
      'each is tied to the proxy record of the same call',
    );
    assert.equal(run.detail.rollout.llmCalls, 2);
    assert.equal(run.detail.rollout.promptTokens, 24, 'tokens counted once per call');
    const agentSpan = byCategory('agent')[0]!;
    assert.equal(byCategory('tool')[0]!.traceId, agentSpan.traceId);
  });
});
