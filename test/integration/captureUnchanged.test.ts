/**
 * Agents whose SDK reads another base-URL variable, or none, captured unchanged through `lightning run`: the Vercel
 * AI SDK's `@ai-sdk/anthropic` (a base ending in `/v1`, then `/messages`), `@ai-sdk/google` (no variable at all: its
 * calls to generativelanguage.googleapis.com reach the rollout through the Node capture preload) and
 * `@langchain/anthropic` with the user's ANTHROPIC_API_URL. The tests set only what a user would (keys, their own
 * base URL) and the daemon's default upstreams; each asserts the record, the calls the upstream got, and the answer.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import {
  AGENTS,
  ANTHROPIC_KEY,
  GEMINI_KEY,
  assertAnthropicTrajectory,
  assertGeminiTrajectory,
  assertNotStored,
  llmOf,
} from '../helpers/providerAgents';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

/** The Messages API calls the upstream got since `seen`, with the key each carried. */
function messagesCalls(seen: number): Array<{ path: string; key: string | undefined }> {
  return upstream.requests
    .slice(seen)
    .filter((r) => r.path.includes('messages'))
    .map((r) => ({
      path: r.path,
      key: (r.headers['x-api-key'] as string | undefined) ?? r.headers.authorization?.replace(/^Bearer /, ''),
    }));
}

const vercel = (provider: string, mode: string): string[] => [
  'node',
  path.join(AGENTS, 'vercel-provider-agent.mjs'),
  provider,
  mode,
];

describe('agents on other base-URL variables, unchanged, through lightning run', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`ai + @ai-sdk/anthropic (${mode}), no base URL of its own: /messages is the Messages API`, async (t) => {
      const seen = upstream.requests.length;
      const run = await runAgent(t, upstream.url, vercel('anthropic', mode), {
        ANTHROPIC_BASE_URL: '',
        ANTHROPIC_API_KEY: ANTHROPIC_KEY,
        LIGHTNING_ANTHROPIC_UPSTREAM_URL: upstream.origin,
      });
      assertAnthropicTrajectory(run, mode === 'stream');
      assert.deepEqual(
        messagesCalls(seen),
        [
          { path: '/v1/messages', key: ANTHROPIC_KEY },
          { path: '/v1/messages', key: ANTHROPIC_KEY },
        ],
        'a bare-origin upstream gets /v1/messages',
      );
      assertNotStored(run, ANTHROPIC_KEY);
    });
  }

  test("ai + @ai-sdk/anthropic with the user's ANTHROPIC_BASE_URL ending in /v1: its calls go there, as without Lightning", async (t) => {
    const seen = upstream.requests.length;
    const run = await runAgent(t, upstream.url, vercel('anthropic', 'json'), {
      ANTHROPIC_BASE_URL: `${upstream.origin}/v1`,
      ANTHROPIC_API_KEY: ANTHROPIC_KEY,
      LIGHTNING_ANTHROPIC_UPSTREAM_URL: 'http://127.0.0.1:1',
    });
    assertAnthropicTrajectory(run, false);
    assert.deepEqual(
      messagesCalls(seen).map((call) => call.path),
      ['/v1/messages', '/v1/messages'],
    );
    assert.equal(llmOf(run)[0]!.attributes['lightning.upstream'], `${upstream.origin}/v1`);
  });

  for (const mode of ['json', 'stream'] as const) {
    test(`ai + @ai-sdk/google (${mode}), which reads no base-URL variable: its calls to Google are captured`, async (t) => {
      const run = await runAgent(t, upstream.url, vercel('google', mode), {
        GOOGLE_GENERATIVE_AI_API_KEY: GEMINI_KEY,
        GOOGLE_GEMINI_BASE_URL: '',
        LIGHTNING_GEMINI_UPSTREAM_URL: upstream.origin,
      });
      assertGeminiTrajectory(upstream, run, mode === 'stream');
      const calls = upstream.requests.filter((r) => r.path.includes('gemini-test')).slice(-2);
      assert.match(
        calls[0]!.path,
        mode === 'stream'
          ? /^\/v1beta\/models\/gemini-test:streamGenerateContent\?alt=sse$/
          : /^\/v1beta\/models\/gemini-test:generateContent$/,
      );
      assert.equal(calls[0]!.headers['x-goog-api-key'], GEMINI_KEY, 'the key reached Google unchanged');
      assertNotStored(run, GEMINI_KEY);
    });
  }

  for (const mode of ['json', 'stream'] as const) {
    test(`@langchain/anthropic (${mode}) with the user's ANTHROPIC_API_URL, which it prefers to ANTHROPIC_BASE_URL`, async (t) => {
      const seen = upstream.requests.length;
      const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'langchain-anthropic-agent.mjs'), mode], {
        ANTHROPIC_API_URL: upstream.origin,
        ANTHROPIC_BASE_URL: '',
        ANTHROPIC_API_KEY: ANTHROPIC_KEY,
        LIGHTNING_ANTHROPIC_UPSTREAM_URL: 'http://127.0.0.1:1',
      });
      assertAnthropicTrajectory(run, mode === 'stream');
      assert.deepEqual(messagesCalls(seen), [
        { path: '/v1/messages', key: ANTHROPIC_KEY },
        { path: '/v1/messages', key: ANTHROPIC_KEY },
      ]);
      assert.equal(
        llmOf(run)[0]!.attributes['lightning.upstream'],
        upstream.origin,
        "the user's ANTHROPIC_API_URL is the rollout's upstream",
      );
      assertNotStored(run, ANTHROPIC_KEY);
    });
  }
});
