/**
 * A reply that stopped at the request's output-token cap (`finish_reason: "length"`, Responses `incomplete`,
 * Anthropic `max_tokens`, Gemini `MAX_TOKENS`), through the proxy for every API, streamed and not: the call is whole
 * (what the model gave under the agent's limit) and says where it stopped; RL rows keep it, flagged; a chat row, whose
 * reply would be a cut demonstration, leaves it out and the export says so, unless `--include-failed`.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import type http from 'node:http';
import path from 'node:path';
import { describe, test } from 'node:test';
import { callBadge, spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { TOKEN_CAP_REASON } from '../../trainer-daemon/lightningrl/transitions';
import { runCli } from '../helpers/daemon';
import { post } from '../helpers/http';
import { daemonAgainst } from '../helpers/modelUpstream';
import { tempDir } from '../helpers/tmp';

const CUT = 'The answer is forty-t';

function cappedHandler(model: string, request: http.IncomingMessage, response: http.ServerResponse): void {
  const json = (body: unknown): void => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  };
  const sse = (events: unknown[], done: boolean): void => {
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    const lines = events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('');
    response.end(done ? `${lines}data: [DONE]\n\n` : lines);
  };
  const usage = { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 };
  if ((request.url ?? '').includes(':generateContent'))
    return json({
      candidates: [{ index: 0, content: { role: 'model', parts: [{ text: CUT }] }, finishReason: 'MAX_TOKENS' }],
      modelVersion: 'gemini-test',
    });
  switch (model) {
    case 'chat-whole':
    case 'chat-capped':
      return json({
        id: `chatcmpl-${model}`,
        object: 'chat.completion',
        model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: model === 'chat-whole' ? '42' : CUT },
            finish_reason: model === 'chat-whole' ? 'stop' : 'length',
          },
        ],
        usage,
      });
    case 'chat-capped-stream': {
      const chunk = (delta: unknown, finish: string | null): unknown => ({
        id: 'chatcmpl-s',
        object: 'chat.completion.chunk',
        model,
        choices: [{ index: 0, delta, finish_reason: finish }],
      });
      return sse([chunk({ role: 'assistant', content: CUT }, null), chunk({}, 'length')], true);
    }
    case 'responses-capped':
      return json({
        id: 'resp_c',
        object: 'response',
        status: 'incomplete',
        incomplete_details: { reason: 'max_output_tokens' },
        model,
        output: [{ type: 'message', id: 'msg_c', role: 'assistant', content: [{ type: 'output_text', text: CUT }] }],
      });
    case 'anthropic-capped':
      return json({
        id: 'msg_a',
        type: 'message',
        role: 'assistant',
        model,
        content: [{ type: 'text', text: CUT }],
        stop_reason: 'max_tokens',
        usage: { input_tokens: 9, output_tokens: 8 },
      });
    case 'anthropic-capped-stream':
      return sse(
        [
          { type: 'message_start', message: { id: 'msg_s', type: 'message', role: 'assistant', content: [], model } },
          { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
          { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: CUT } },
          { type: 'content_block_stop', index: 0 },
          { type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 8 } },
          { type: 'message_stop' },
        ],
        false,
      );
    default:
      response.writeHead(400).end(`no script for ${model}`);
  }
}

describe('a reply cut at its output-token cap', () => {
  const world = daemonAgainst(cappedHandler);
  const messages = [{ role: 'user', content: 'What is six times seven?' }];
  const calls = [
    ['/v1/chat/completions', 'chat-capped', { messages, max_tokens: 8 }],
    ['/v1/chat/completions', 'chat-capped-stream', { messages, max_tokens: 8, stream: true }],
    ['/v1/responses', 'responses-capped', { input: 'What is six times seven?', max_output_tokens: 8 }],
    ['/v1/messages', 'anthropic-capped', { max_tokens: 8, messages }],
    ['/v1/messages', 'anthropic-capped-stream', { max_tokens: 8, messages, stream: true }],
    [
      '/v1beta/models/gemini-test:generateContent',
      'gemini-test',
      { contents: [{ role: 'user', parts: [{ text: 'What is six times seven?' }] }] },
    ],
  ] as const;

  /** One call through a new rollout of its own, rated 1 and ended; its span. */
  const callThrough = async (route: string, model: string, body: object): Promise<Span> => {
    const origin = world.upstream.url.replace(/\/v1$/, '');
    const { rollout, url } = await world.client.request('startAgentRun', {
      label: 'token-cap',
      providerUpstreams: { anthropic: world.upstream.url, gemini: origin },
    });
    const answer = await post(`${url}${route}`, JSON.stringify({ model, ...body }), {
      'content-type': 'application/json',
      'x-api-key': 'k',
      'x-goog-api-key': 'k',
      'anthropic-version': '2023-06-01',
    });
    assert.equal(answer.status, 200, `${model}: ${answer.body}`);
    assert.ok(answer.body.includes(model === 'chat-whole' ? '"42"' : 'forty-t'), `${model}: the reply as it came`);
    const span = await world.spanOf(rollout.id);
    await world.client.request('addReward', { rolloutId: rollout.id, value: 1 });
    await world.client.request('transitionRollout', { id: rollout.id, to: 'succeeded' });
    return span;
  };

  test('every API, streamed and not: recorded whole, its badge says where it stopped; only RL rows keep it by default', async (t) => {
    for (const [route, model, body] of calls) {
      const span = await callThrough(route, model, body);
      assert.deepEqual(spanOutcome(span), { kind: 'ok' }, `${model}: the model's answer, not a failure`);
      assert.equal(
        callBadge(span, () => undefined),
        'stopped at its token cap',
        model,
      );
    }
    const whole = await callThrough('/v1/chat/completions', 'chat-whole', { messages });
    assert.equal(
      callBadge(whole, () => undefined),
      null,
      'a reply that ran to its end has no badge',
    );

    const dir = tempDir(t);
    const store = world.daemon.ready.store;
    const exportTo = async (name: string, ...flags: string[]) => {
      const out = path.join(dir, `${name}.jsonl`);
      const result = await runCli(['export', '--store', store, '--label', 'token-cap', '--out', out, ...flags]);
      assert.equal(result.code, 0, result.stderr);
      const rows = fs
        .readFileSync(out, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      return { rows, stderr: result.stderr, summary: JSON.parse(result.stdout) as Record<string, unknown> };
    };

    // RL rows: all seven, the cut ones flagged (a user filtering overlong samples can).
    const transitions = await exportTo('transitions');
    assert.equal(transitions.rows.length, calls.length + 1);
    assert.equal(transitions.rows.filter((row) => row.stoppedAtTokenCap === true).length, calls.length);

    // Chat rows: only the whole reply; the export names what it left out and how to keep it.
    const chat = await exportTo('chat', '--format', 'chat');
    assert.deepEqual(
      chat.rows.map((row) => (row.messages as Array<{ content: unknown }>).at(-1)!.content),
      ['42'],
    );
    assert.deepEqual(chat.summary.notChat, { [TOKEN_CAP_REASON]: calls.length });
    assert.match(chat.stderr, /no chat row for 6 calls \(the reply stopped at its output-token cap/);
    assert.match(chat.stderr, /--include-failed keeps replies cut at their token cap, flagged/);

    // --include-failed: every reply, the cut ones flagged in their row.
    const kept = await exportTo('kept', '--format', 'chat', '--include-failed');
    assert.equal(kept.rows.length, calls.length + 1);
    const flagged = kept.rows.filter((row) => row.stoppedAtTokenCap === true);
    assert.equal(flagged.length, calls.length);
    for (const row of flagged) {
      const reply = (row.messages as Array<{ role: string; content: unknown }>).at(-1)!;
      assert.deepEqual([reply.role, reply.content], ['assistant', CUT]);
    }
  });
});
