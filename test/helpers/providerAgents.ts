/**
 * What the provider-API capture tests share: the keys, the agents' environments, and the checks a
 * user makes of an Anthropic or Gemini agent's trajectory (providers*.test.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { asChatCall, type Json, type Span } from '../../trainer-daemon/protocol';
import { REPO_ROOT } from './daemon';
import type { AgentRun } from './runAgent';
import type { ScriptedUpstream } from './scriptedUpstream';
import { PROVIDER_ANSWER } from './scriptedProviders';

export const AGENTS = path.join(REPO_ROOT, 'test', 'fixtures', 'agents');
export const ANTHROPIC_KEY = 'sk-ant-api03-test-secret-0123456789';
export const GEMINI_KEY = 'AIzaSyTestSecret0123456789abcdefghijk';

export type Obj = { [key: string]: Json };
export const llmOf = (run: AgentRun): Span[] => run.detail.spans.filter((s) => s.category === 'llm');
export const toolCallOf = (span: Span): string => {
  const message = ((asChatCall(span.attributes).response?.choices as Obj[] | undefined)?.[0]?.message ?? {}) as Obj;
  const call = ((message.tool_calls ?? []) as Obj[])[0]?.function as Obj | undefined;
  return call ? `${String(call.name)}(${String(call.arguments)})` : '';
};

/** The store's files hold no trace of the key (the database, its WAL, the logs). */
export function assertNotStored(run: AgentRun, secret: string): void {
  const folder = path.join(run.cwd, '.lightning');
  const files = fs.readdirSync(folder, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile());
  assert.ok(files.length > 0);
  for (const file of files) {
    const bytes = fs.readFileSync(path.join(file.parentPath, file.name));
    assert.equal(bytes.includes(Buffer.from(secret)), false, `${file.name} holds the API key`);
  }
}

export function python(): string {
  const interpreter = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    interpreter,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt installed (npm test provisions .cache/venv)',
  );
  try {
    execFileSync(interpreter, ['-c', 'import anthropic, google.genai, openai'], { stdio: 'pipe' });
  } catch {
    assert.fail(
      `${interpreter} lacks the anthropic / google-genai / openai packages: pip install -r trainer-daemon/python/requirements-test.txt`,
    );
  }
  return interpreter;
}

export const anthropicEnv = (upstream: ScriptedUpstream): NodeJS.ProcessEnv => ({
  ANTHROPIC_BASE_URL: upstream.origin,
  ANTHROPIC_API_KEY: ANTHROPIC_KEY,
});
export const geminiEnv = (upstream: ScriptedUpstream): NodeJS.ProcessEnv => ({
  GOOGLE_GEMINI_BASE_URL: upstream.origin,
  GEMINI_API_KEY: GEMINI_KEY,
  GOOGLE_API_KEY: '',
});

export function assertAnthropicTrajectory(run: AgentRun, streamed: boolean): void {
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
  const llm = llmOf(run);
  assert.equal(llm.length, 2, 'two LLM calls');
  for (const span of llm) {
    assert.equal(span.attributes['lightning.api'], 'anthropic.messages');
    assert.equal(span.attributes['gen_ai.provider.name'], 'anthropic');
    assert.equal(span.name, 'chat claude-test');
    assert.equal(span.attributes['lightning.streamed'], streamed);
    assert.equal(span.statusCode, 'ok');
    assert.equal(span.attributes['gen_ai.usage.input_tokens'], 12 + 3 + 5, 'input tokens count the cached ones');
    assert.equal(span.attributes['gen_ai.usage.cache_read.input_tokens'], 5);
    assert.equal(span.attributes['gen_ai.usage.cache_creation.input_tokens'], 3);
    assert.equal(span.attributes['gen_ai.usage.output_tokens'], 7);
  }
  assert.deepEqual(
    llm.map((s) => s.attributes['gen_ai.response.finish_reasons']),
    [['tool_use'], ['end_turn']],
  );
  assert.equal(toolCallOf(llm[0]!), 'get_weather({"city":"Paris"})');
  const second = asChatCall(llm[1]!.attributes).request!;
  assert.deepEqual(
    (second.messages as Obj[]).map((m) => m.role),
    ['system', 'user', 'assistant', 'tool'],
  );
  assert.equal(run.detail.rollout.llmCalls, 2);
}

export function assertGeminiTrajectory(upstream: ScriptedUpstream, run: AgentRun, streamed: boolean): void {
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.match(run.stdout, new RegExp(`ANSWER: ${PROVIDER_ANSWER}`));
  const llm = llmOf(run);
  assert.equal(llm.length, 2, 'two LLM calls');
  for (const span of llm) {
    assert.equal(span.attributes['lightning.api'], 'gemini.generate_content');
    assert.equal(span.attributes['gen_ai.provider.name'], 'gcp.gemini');
    assert.equal(span.attributes['gen_ai.request.model'], 'gemini-test');
    assert.equal(span.name, 'generate_content gemini-test');
    assert.equal(span.attributes['lightning.streamed'], streamed);
    assert.equal(span.attributes['gen_ai.usage.input_tokens'], 12);
    assert.equal(span.attributes['gen_ai.usage.output_tokens'], 7);
  }
  assert.equal(toolCallOf(llm[0]!), 'get_weather({"city":"Paris"})');
  const texts = (((llm[1]!.attributes['lightning.response'] as Obj).candidates as Obj[])[0]!.content as Obj)
    .parts as Obj[];
  assert.deepEqual(texts, [{ text: PROVIDER_ANSWER }], 'streamed text chunks joined');
  const second = asChatCall(llm[1]!.attributes).request!;
  assert.deepEqual(
    (second.messages as Obj[]).map((m) => m.role),
    ['system', 'user', 'assistant', 'tool'],
  );
  const calls = upstream.requests
    .filter((r) => r.path.includes(':generateContent') || r.path.includes(':streamGenerateContent'))
    .slice(-2);
  for (const call of calls) assert.equal(call.headers['x-goog-api-key'], GEMINI_KEY);
  assertNotStored(run, GEMINI_KEY);
}
