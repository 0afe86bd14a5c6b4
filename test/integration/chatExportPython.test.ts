// needs: venv
/**
 * The Python `openai` SDK in the shapes besides plain chat, through `lightning run`, read row by row as
 * chatExport.test.ts reads the Node SDK's: legacy `functions` (JSON and streamed) carried into the chat export as
 * tool calls; chat logprobs (JSON and streamed) recorded byte for byte — the top alternatives' ` token` strings
 * included — and read by training. (streamLimitsPython.test.ts: the streamed shapes.)
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { asChatCall, type Span } from '../../trainer-daemon/protocol';
import { answer, assertLegacyFunctionsRun, chatRows } from '../helpers/chatRows';
import { exportRows, llmOf } from '../helpers/outcomeChecks';
import { AGENTS, python } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import {
  ANSWER_LOGPROBS,
  ANSWER_TOKENS,
  startScriptedUpstream,
  type ScriptedUpstream,
} from '../helpers/scriptedUpstream';

type Obj = Record<string, unknown>;

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const agent = (mode: string): string[] => [python(), path.join(AGENTS, 'openai_shapes_agent.py'), mode];

/** The logprobs of the answer as the upstream sent them (`top_logprobs: 2`), entry by entry. */
const sentLogprobs = {
  content: ANSWER_TOKENS.map((token, i) => {
    const entry = { token, logprob: ANSWER_LOGPROBS[i]!, bytes: [...Buffer.from(token)] };
    return { ...entry, top_logprobs: [entry, { token: ' token', logprob: -4, bytes: [...Buffer.from(' token')] }] };
  }),
  refusal: null,
};

describe('Python openai: legacy functions and logprobs, recorded whole and exported row by row', () => {
  for (const mode of ['functions', 'functions-stream'] as const) {
    test(`legacy functions (${mode === 'functions' ? 'JSON' : 'streamed'}): function_call carried as tool_calls, function results as tool messages`, async (t) => {
      const run = await runAgent(t, upstream.url, agent(mode));
      await assertLegacyFunctionsRun(run);
    });
  }

  test('chat logprobs (JSON and streamed): recorded as sent, read by training, the chat rows whole answers', async (t) => {
    const run = await runAgent(t, upstream.url, agent('logprobs'), { AGENT_MODEL: 'answer-logprobs' });
    const tokens = JSON.stringify(ANSWER_TOKENS);
    assert.ok(run.stdout.includes(`TOKENS: ${tokens} STREAMED: ${tokens}`), run.stdout + run.stderr);
    const llm = llmOf(run);
    assert.deepEqual(
      llm.map((span: Span) => span.attributes['lightning.streamed']),
      [false, true],
    );
    const [whole, streamed] = llm.map(
      (span) => ((span.attributes['lightning.response'] as Obj).choices as Obj[])[0]!.logprobs as Obj,
    );
    assert.equal(JSON.stringify(whole), JSON.stringify(sentLogprobs), 'the JSON answer’s logprobs byte for byte');
    // A stream's logprobs are its events' lists joined, field by field (the `refusal: null` of each event is no list).
    assert.equal(JSON.stringify(streamed), JSON.stringify({ content: sentLogprobs.content }), 'the stream’s, joined');
    for (const span of llm) assert.equal((asChatCall(span.attributes).response!.choices as Obj[]).length, 1);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(
      transitions.rows.map((row) => [row.spanId, row.logprobs]),
      llm.map((span) => [span.spanId, ANSWER_LOGPROBS]),
    );
    const { rows } = await chatRows(run);
    assert.deepEqual(
      rows.map((row) => row.messages),
      llm.map(() => [{ role: 'user', content: 'Weather in Paris?' }, answer]),
    );
  });
});
