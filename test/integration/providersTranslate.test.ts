/**
 * `--token-ids` (a checkpoint, the trainer's policy, any engine asked for token ids): Anthropic and
 * Gemini agents are answered through chat completions, with exact token ids recorded; and
 * `lightning export --format chat` converts their calls.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { PROVIDER_ANSWER } from '../helpers/scriptedProviders';
import { AGENTS, anthropicEnv, llmOf, toolCallOf, type Obj } from '../helpers/providerAgents';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

describe('--token-ids: Anthropic and Gemini agents answered through chat completions', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`@anthropic-ai/sdk (${mode}) against a chat-completions-only server`, async (t) => {
      const seen = upstream.requests.length;
      const run = await runAgent(
        t,
        upstream.url,
        ['node', path.join(AGENTS, 'anthropic-agent.mjs'), mode],
        { ANTHROPIC_BASE_URL: '', ANTHROPIC_API_KEY: '' },
        ['--token-ids'],
      );
      assert.equal(run.code, 0, run.stdout + run.stderr);
      assert.match(run.stdout, /ANSWER: It is sunny in Paris\./);
      const sent = upstream.requests.slice(seen);
      assert.deepEqual(
        sent.map((r) => r.path),
        ['/v1/chat/completions', '/v1/chat/completions'],
        'only chat completions reach the server',
      );
      const translated = sent[1]!.body!;
      assert.equal(translated.return_token_ids, true);
      assert.deepEqual(
        (translated.messages as Obj[]).map((m) => m.role),
        ['system', 'user', 'assistant', 'tool'],
      );
      assert.equal(((translated.messages as Obj[])[1]!.content as Obj[])[1]!.type, 'image_url');
      assert.deepEqual((translated.tools as Obj[])[0], {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      });
      const llm = llmOf(run);
      assert.equal(llm.length, 2);
      for (const span of llm) {
        assert.equal(span.attributes['lightning.api'], 'anthropic.messages');
        assert.equal(span.attributes['lightning.translated_to'], 'chat.completions');
        assert.deepEqual(span.attributes['lightning.prompt_token_ids'], [1, 2, 3]);
        assert.deepEqual(span.attributes['lightning.response_token_ids'], [4, 5]);
        assert.equal(span.attributes['lightning.streamed'], mode === 'stream');
      }
      assert.equal(toolCallOf(llm[0]!), 'get_weather({"city":"Paris"})');
    });
  }

  test("what the policy cannot answer (count_tokens) is refused in Anthropic's shape, and nothing goes to the provider", async (t) => {
    const seen = upstream.requests.length;
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'json', 'count'],
      { ANTHROPIC_BASE_URL: '', ANTHROPIC_API_KEY: '' },
      ['--token-ids'],
    );
    assert.equal(run.code, 3);
    assert.match(
      run.stdout,
      /ERROR: 404 NotFoundError .*\/v1\/messages\/count_tokens is not served while a chat-completions server/,
    );
    assert.equal(upstream.requests.length, seen);
  });

  test('@google/genai (stream) against a chat-completions-only server', async (t) => {
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'gemini-agent.mjs'), 'stream'],
      { GOOGLE_GEMINI_BASE_URL: '', GEMINI_API_KEY: '' },
      ['--token-ids'],
    );
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /ANSWER: It is sunny in Paris\./);
    const llm = llmOf(run);
    assert.equal(llm.length, 2);
    assert.ok(llm.every((s) => Array.isArray(s.attributes['lightning.prompt_token_ids'])));
    assert.equal(toolCallOf(llm[0]!), 'get_weather({"city":"Paris"})');
  });

  test('Gemini streamGenerateContent without alt=sse is answered as the API does: one JSON array of chunks', async (t) => {
    const agent = `
      const base = process.env.GOOGLE_GEMINI_BASE_URL;
      const response = await fetch(base + '/v1beta/models/gemini-test:streamGenerateContent', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-goog-api-key': 'k' },
        body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'What is the weather in Paris?' }] }] }),
      });
      const chunks = JSON.parse(await response.text());
      console.log('TYPE ' + response.headers.get('content-type'));
      console.log('CHUNKS ' + chunks.length + ' ' + typeof chunks[0].candidates[0].content.parts);
    `;
    const run = await runAgent(
      t,
      upstream.url,
      ['node', '--input-type=module', '-e', agent],
      { GOOGLE_GEMINI_BASE_URL: '', GEMINI_API_KEY: '' },
      ['--token-ids'],
    );
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /TYPE application\/json/);
    assert.match(run.stdout, /CHUNKS 1 object/);
    assert.equal(llmOf(run).length, 1);
  });

  test('lightning export --format chat converts an Anthropic rollout', async (t) => {
    const run = await runAgent(
      t,
      upstream.url,
      ['node', path.join(AGENTS, 'anthropic-agent.mjs'), 'json'],
      anthropicEnv(upstream),
    );
    assert.equal(run.code, 0, run.stdout);
    const out = path.join(run.cwd, 'chat.jsonl');
    const exported = await runCli(['export', '--format', 'chat', '--missing-reward', 'fill', '--out', out], {
      cwd: run.cwd,
    });
    assert.equal(exported.code, 0, exported.stderr);
    const lines = fs
      .readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { messages: Obj[]; tools?: Obj[] });
    assert.equal(lines.length, 2);
    assert.deepEqual(
      lines[0]!.messages.map((m) => m.role),
      ['system', 'user', 'assistant'],
    );
    assert.equal(((lines[0]!.messages[2]!.tool_calls as Obj[])[0]!.function as Obj).name, 'get_weather');
    assert.deepEqual(
      lines[1]!.messages.map((m) => m.role),
      ['system', 'user', 'assistant', 'tool', 'assistant'],
    );
    assert.equal(lines[1]!.messages.at(-1)!.content, PROVIDER_ANSWER);
    assert.equal((lines[0]!.tools![0]!.function as Obj).name, 'get_weather');
  });
});
