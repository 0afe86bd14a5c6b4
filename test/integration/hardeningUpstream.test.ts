/**
 * The proxy against an upstream that misbehaves at the byte level (issue 28): one SSE line or event far past any
 * answer's size, redirects, a gzip body the proxy asked not to get; and (issue 27) a reused keep-alive socket that
 * the upstream closed, which must not cost the agent its call; an error inside a 200 answer, which is no answer.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';
import { post } from '../helpers/http';
import { daemonAgainst, upstreamOf } from '../helpers/modelUpstream';

const MiB = 1024 * 1024;

/** Writes `total` characters of `x` in 1 MiB chunks, honouring backpressure. */
async function writeMany(response: http.ServerResponse, total: number): Promise<void> {
  const chunk = 'x'.repeat(MiB);
  for (let sent = 0; sent < total; sent += MiB) {
    if (response.destroyed) return;
    if (!response.write(chunk)) await new Promise((resolve) => response.once('drain', resolve));
  }
}

function sseHandler(model: string, _request: http.IncomingMessage, response: http.ServerResponse): void {
  response.writeHead(200, { 'content-type': 'text/event-stream' });
  const head =
    'data: {"id":"long","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n';
  void (async () => {
    response.write(head);
    if (model === 'long-line') {
      // One line of 40 Mi characters: far past the 16 Mi cap, then a proper end.
      response.write('data: {"choices":[{"index":0,"delta":{"content":"');
      await writeMany(response, 40 * MiB);
      response.end('"}}]}\n\ndata: [DONE]\n\n');
    } else if (model === 'no-newline') {
      response.write('data: ');
      await writeMany(response, 40 * MiB);
      response.end();
    } else if (model === 'many-data-lines') {
      // One event of many `data:` lines and no blank line: the event grows, no line is long.
      const line = `data: ${'y'.repeat(64 * 1024)}\n`;
      for (let sent = 0; sent < 40 * MiB && !response.destroyed; sent += line.length) {
        if (!response.write(line)) await new Promise((resolve) => response.once('drain', resolve));
      }
      response.end('\ndata: [DONE]\n\n');
    } else {
      response.end('data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n');
    }
  })();
}

async function healthWithin(url: string, ms: number): Promise<number> {
  const started = Date.now();
  const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(ms) });
  assert.equal(response.status, 200);
  return Date.now() - started;
}

describe('an SSE line or event past the cap', () => {
  const world = daemonAgainst(sseHandler);

  for (const model of ['long-line', 'no-newline', 'many-data-lines']) {
    test(`${model}: the agent gets every byte, the call is recorded truncated at the SSE event limit`, async () => {
      const { rollout, url } = await world.client.request('startAgentRun', {});
      const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model, stream: true, messages: [] }));
      assert.equal(response.status, 200);
      assert.ok(response.body.length > 40 * MiB, `the agent got the whole stream (${response.body.length} characters)`);
      const span = await waitFor(
        async () => (await world.client.request('getRollout', { id: rollout.id })).spans[0],
        'the call’s span',
      );
      assert.equal(world.daemon.process.exitCode, null, 'the daemon is alive');
      // no-newline ends inside the event that passed the cap: the cap, met first, is why it is not whole.
      assert.deepEqual(
        [span.attributes['lightning.outcome'], span.attributes['lightning.truncated_by']],
        ['truncated', 'sse_event'],
        JSON.stringify(span.attributes).slice(0, 500),
      );
      const recorded = span.attributes['lightning.response'] as { lightning_truncated?: string } | undefined;
      assert.match(recorded?.lightning_truncated ?? '', /over the 16777216-character limit/);
      assert.ok((await healthWithin(world.daemon.ready.url, 1_000)) < 1_000);
    });
  }
});

const chatJson = (id: string): string =>
  JSON.stringify({
    id,
    object: 'chat.completion',
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  });

function encodingHandler(model: string, request: http.IncomingMessage, response: http.ServerResponse): void {
  if (model === 'redirect') {
    response.writeHead(307, {
      location: 'https://user:pw@elsewhere.example/v1/chat/completions?key=secret-value-123',
      'content-type': 'text/html',
    });
    response.end('<a href="https://elsewhere.example/">moved</a>');
  } else if (model === 'gzip-json') {
    // Compressed although the proxy sent Accept-Encoding: identity.
    response.writeHead(200, {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
      'x-asked': String(request.headers['accept-encoding']),
    });
    response.end(zlib.gzipSync(chatJson('gzipped')));
  } else if (model === 'gzip-sse') {
    response.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' });
    const events = [
      '{"id":"gz-stream","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}',
      '{"id":"gz-stream","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}',
      '[DONE]',
    ];
    response.end(zlib.gzipSync(events.map((data) => `data: ${data}\n\n`).join('')));
  } else if (model === 'compress') {
    response.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'compress' });
    response.end('xx');
  } else {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(chatJson('plain'));
  }
}

describe('redirects and encodings the proxy did not ask for', () => {
  const world = daemonAgainst(encodingHandler);

  test('an upstream 307 is not followed: the agent gets a 502 naming the redirect, the call is recorded as HTTP 307', async () => {
    const { rollout, url } = await world.client.request('startAgentRun', {});
    const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'redirect', messages: [] }));
    assert.equal(response.status, 502, response.body);
    assert.match(
      response.body,
      /answered HTTP 307, a redirect to https:\/\/elsewhere\.example\/v1\/chat\/completions; Lightning does not follow redirects/,
    );
    assert.doesNotMatch(response.body, /secret-value-123|pw@/);
    const span = await world.spanOf(rollout.id);
    assert.equal(span.attributes['lightning.outcome'], 'upstream_error');
    assert.equal(span.attributes['http.response.status_code'], 307);
    assert.match(span.statusMessage ?? '', /redirect/);
  });

  test('a gzip JSON answer sent although identity was asked is decoded: 200 to the agent, recorded whole with its encoding', async () => {
    const { rollout, url } = await world.client.request('startAgentRun', {});
    const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'gzip-json', messages: [] }));
    assert.equal(response.status, 200, response.body);
    assert.equal((JSON.parse(response.body) as { id: string }).id, 'gzipped');
    const span = await world.spanOf(rollout.id);
    assert.equal(span.attributes['lightning.outcome'], 'ok');
    assert.equal(span.attributes['gen_ai.response.id'], 'gzipped');
    assert.equal(span.attributes['lightning.upstream_content_encoding'], 'gzip');
  });

  test('a gzip SSE stream is decoded as it comes: the agent reads plain events, the record is reassembled', async () => {
    const { rollout, url } = await world.client.request('startAgentRun', {});
    const response = await post(
      `${url}/v1/chat/completions`,
      JSON.stringify({ model: 'gzip-sse', stream: true, messages: [] }),
    );
    assert.equal(response.status, 200, response.body);
    assert.match(response.body, /^data: \{"id":"gz-stream"/);
    const span = await world.spanOf(rollout.id);
    assert.equal(span.attributes['lightning.outcome'], 'ok');
    const message = (span.attributes['lightning.response'] as { choices: Array<{ message: { content: string } }> })
      .choices[0]!.message;
    assert.equal(message.content, 'Hello');
    assert.equal(span.attributes['lightning.upstream_content_encoding'], 'gzip');
  });

  test('an encoding Lightning cannot decode is a 502 naming it, recorded', async () => {
    const { rollout, url } = await world.client.request('startAgentRun', {});
    const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'compress', messages: [] }));
    assert.equal(response.status, 502);
    assert.match(response.body, /Content-Encoding \\"compress\\"/);
    assert.equal((await world.spanOf(rollout.id)).statusCode, 'error');
  });
});

/** Answers in HTTP 200 that carry an error, chosen by the path (Gemini) or the model (chat completions, responses). */
function errorInsideHandler(model: string, request: http.IncomingMessage, response: http.ServerResponse): void {
  const json = (body: unknown): void => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  };
  const sse = (events: unknown[], done = false): void => {
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    const lines = events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('');
    response.end(done ? `${lines}data: [DONE]\n\n` : lines);
  };
  // Streams that end cleanly mid-answer (the connection closed without an error): no last event.
  if ((request.url ?? '').includes(':streamGenerateContent?alt=sse'))
    return sse([{ candidates: [{ index: 0, content: { role: 'model', parts: [{ text: 'It is' }] } }] }]);
  if (model === 'chat-cut')
    return sse([
      { id: 'c2', object: 'chat.completion.chunk', model, choices: [{ index: 0, delta: { content: 'It is' } }] },
    ]);
  if (model === 'responses-terse')
    // A terse gateway's last event, without its response object: the answer still ended there.
    return sse(
      [
        { type: 'response.created', response: { id: 'resp_4', object: 'response', status: 'in_progress' } },
        { type: 'response.output_text.delta', delta: 'It is sunny' },
        { type: 'response.completed' },
      ],
      true,
    );
  if (model === 'responses-cut' || model === 'responses-done-cut')
    return sse(
      [
        { type: 'response.created', response: { id: 'resp_3', object: 'response', status: 'in_progress' } },
        { type: 'response.output_text.delta', delta: 'It is' },
      ],
      // A `[DONE]` (some gateways add one) ends the stream, not the response: still no response.completed.
      model === 'responses-done-cut',
    );
  if (model === 'anthropic-cut')
    return sse([
      { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], model } },
      {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'tool_use', id: 'toolu_1', name: 'read', input: {} },
      },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"path": "/et' } },
    ]);
  if ((request.url ?? '').includes('gemini-quota:streamGenerateContent')) {
    // Gemini's error for a stream without alt=sse: the error object inside a one-item JSON array, with HTTP 429.
    response.writeHead(429, { 'content-type': 'application/json' });
    response.end(JSON.stringify([{ error: { code: 429, message: 'Quota exceeded.', status: 'RESOURCE_EXHAUSTED' } }]));
    return;
  }
  if ((request.url ?? '').includes(':streamGenerateContent')) {
    // Gemini's stream as one JSON array (no alt=sse) whose last item is an error: the answer broke off.
    json([
      { candidates: [{ content: { role: 'model', parts: [{ text: 'It is' }] } }] },
      { error: { code: 503, message: 'The model is overloaded.', status: 'UNAVAILABLE' } },
    ]);
  } else if (model === 'responses-failed' || model === 'chat-string-error') {
    // A stream that fails after some text: Responses' own response.failed, and a server's last chunk whose error is a
    // string (as text-generation servers report a failed generation).
    const events =
      model === 'responses-failed'
        ? [
            { type: 'response.created', response: { id: 'resp_2', object: 'response', status: 'in_progress' } },
            { type: 'response.output_text.delta', delta: 'It is' },
            {
              type: 'response.failed',
              response: {
                id: 'resp_2',
                object: 'response',
                status: 'failed',
                error: { code: 'server_error', message: 'The server failed mid-answer.' },
                output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'It is' }] }],
              },
            },
          ]
        : [
            { id: 'c1', object: 'chat.completion.chunk', model, choices: [{ index: 0, delta: { content: 'It is' } }] },
            { error: 'Request failed during generation: CUDA out of memory', error_type: 'generation' },
          ];
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    response.end(`${events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('')}data: [DONE]\n\n`);
  } else if (model === 'gateway-error') json({ error: { message: 'upstream provider timed out', type: 'timeout' } });
  else if (model === 'responses-ok')
    json({ id: 'resp_1', object: 'response', status: 'completed', error: null, output: [], model });
  else json({ id: 'plain', object: 'chat.completion', model, choices: [] });
}

describe('an error inside an HTTP 200 answer', () => {
  const world = daemonAgainst(errorInsideHandler);

  /** A Gemini agent's streamGenerateContent (no alt=sse) to `model`, through a new rollout; its answer and rollout. */
  const geminiStream = async (model: string): Promise<{ rolloutId: string; status: number; body: string }> => {
    const origin = world.upstream.url.replace(/\/v1$/, '');
    const { rollout, url } = await world.client.request('startAgentRun', { providerUpstreams: { gemini: origin } });
    const response = await post(
      `${url}/v1beta/models/${model}:streamGenerateContent`,
      JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'weather?' }] }] }),
      { 'content-type': 'application/json', 'x-goog-api-key': 'k' },
    );
    return { rolloutId: rollout.id, status: response.status, body: response.body };
  };

  test('Gemini streamGenerateContent as one JSON array ending in an error: the agent gets it, the call is an upstream error', async () => {
    const response = await geminiStream('gemini-test');
    assert.equal(response.status, 200, 'relayed as it came');
    assert.equal((JSON.parse(response.body) as unknown[]).length, 2);
    const span = await world.spanOf(response.rolloutId);
    assert.equal(span.attributes['lightning.outcome'], 'upstream_error');
    assert.equal(span.statusCode, 'error');
    assert.match(span.statusMessage ?? '', /The model is overloaded/);
  });

  test('Gemini’s error array with HTTP 429: the call is an upstream error whose record keeps the error object', async () => {
    const response = await geminiStream('gemini-quota');
    assert.equal(response.status, 429, 'relayed as it came');
    const span = await world.spanOf(response.rolloutId);
    assert.equal(span.attributes['lightning.outcome'], 'upstream_error');
    assert.equal(span.statusMessage, 'upstream HTTP 429: Quota exceeded.');
    assert.deepEqual(span.attributes['lightning.response'], {
      error: { code: 429, message: 'Quota exceeded.', status: 'RESOURCE_EXHAUSTED' },
    });
  });

  test('a gateway’s {"error": …} in a 200 is an upstream error; a Responses answer with "error": null is whole', async () => {
    const failed = await world.client.request('startAgentRun', {});
    const gateway = await post(
      `${failed.url}/v1/chat/completions`,
      JSON.stringify({ model: 'gateway-error', messages: [] }),
    );
    assert.equal(gateway.status, 200);
    const span = await world.spanOf(failed.rollout.id);
    assert.equal(span.attributes['lightning.outcome'], 'upstream_error');
    assert.match(span.statusMessage ?? '', /upstream error in an HTTP 200 answer: upstream provider timed out/);
    const whole = await world.client.request('startAgentRun', {});
    const ok = await post(`${whole.url}/v1/responses`, JSON.stringify({ model: 'responses-ok', input: 'hi' }));
    assert.equal(ok.status, 200);
    assert.equal((await world.spanOf(whole.rollout.id)).attributes['lightning.outcome'], 'ok');
  });

  test('a stream that fails after some text (Responses response.failed; a chunk whose error is a string) is an upstream error', async () => {
    for (const [path, model, message] of [
      ['/v1/responses', 'responses-failed', /The server failed mid-answer/],
      ['/v1/chat/completions', 'chat-string-error', /CUDA out of memory/],
    ] as const) {
      const { rollout, url } = await world.client.request('startAgentRun', {});
      const streamed = await post(`${url}${path}`, JSON.stringify({ model, input: 'hi', messages: [], stream: true }));
      assert.equal(streamed.status, 200, 'relayed as it came');
      assert.match(streamed.body, /It is/);
      const span = await world.spanOf(rollout.id);
      assert.equal(span.attributes['lightning.outcome'], 'upstream_error', model);
      assert.equal(span.statusCode, 'error');
      assert.match(span.statusMessage ?? '', message);
    }
  });

  test('a stream that ends cleanly before its last event (no [DONE] or finish reason, response.completed even after a [DONE], message_stop, finishReason) is an upstream error', async () => {
    const origin = world.upstream.url.replace(/\/v1$/, '');
    for (const [path, model, body] of [
      ['/v1/chat/completions', 'chat-cut', { messages: [] }],
      ['/v1/responses', 'responses-cut', { input: 'hi' }],
      ['/v1/responses', 'responses-done-cut', { input: 'hi' }],
      ['/v1/messages', 'anthropic-cut', { max_tokens: 64, messages: [{ role: 'user', content: 'read it' }] }],
      ['/v1beta/models/gemini-test:streamGenerateContent?alt=sse', 'gemini-test', { contents: [] }],
    ] as const) {
      const { rollout, url } = await world.client.request('startAgentRun', {
        providerUpstreams: { anthropic: world.upstream.url, gemini: origin },
      });
      const streamed = await post(`${url}${path}`, JSON.stringify({ model, stream: true, ...body }), {
        'content-type': 'application/json',
        'x-goog-api-key': 'k',
        'x-api-key': 'k',
        'anthropic-version': '2023-06-01',
      });
      assert.equal(streamed.status, 200, `${model}: relayed as it came`);
      const span = await world.spanOf(rollout.id);
      assert.equal(span.attributes['lightning.outcome'], 'upstream_error', model);
      assert.match(span.statusMessage ?? '', /the stream ended before its last event/, model);
    }
    const { rollout, url } = await world.client.request('startAgentRun', {});
    const terse = await post(
      `${url}/v1/responses`,
      JSON.stringify({ model: 'responses-terse', stream: true, input: 'hi' }),
    );
    assert.equal(terse.status, 200);
    assert.equal((await world.spanOf(rollout.id)).attributes['lightning.outcome'], 'ok', 'response.completed ends it');
  });

  test('a policy server’s {"error": …} in a 200 to a translated Anthropic call: 502 in Anthropic’s shape, an upstream error', async () => {
    const { rollout, url } = await world.client.request('startAgentRun', {
      upstream: world.upstream.url,
      tokenIds: true,
    });
    const response = await post(
      `${url}/v1/messages`,
      JSON.stringify({ model: 'gateway-error', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
      { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    );
    assert.equal(response.status, 502, response.body);
    const body = JSON.parse(response.body) as { type: string; error: { message: string } };
    assert.equal(body.type, 'error');
    assert.match(body.error.message, /answered HTTP 200: upstream provider timed out/);
    const span = await world.spanOf(rollout.id);
    assert.equal(span.attributes['lightning.outcome'], 'upstream_error');
  });
});

/** An upstream that answers one request per connection and drops the connection at the next one, unanswered. */
function oneShotUpstream(): Promise<{
  url: string;
  answered: () => number;
  dropped: () => number;
  close(): Promise<void>;
}> {
  const perSocket = new WeakMap<net.Socket, number>();
  let answered = 0;
  let dropped = 0;
  return upstreamOf((_model, request, response) => {
    const seen = (perSocket.get(request.socket) ?? 0) + 1;
    perSocket.set(request.socket, seen);
    if (seen > 1) {
      dropped += 1;
      request.socket.destroy();
      return;
    }
    answered += 1;
    response.writeHead(200, { 'content-type': 'application/json', connection: 'keep-alive' });
    response.end(chatJson(`call-${answered}`));
  }).then((server) => ({ ...server, answered: () => answered, dropped: () => dropped }));
}

test('a reused keep-alive socket that fails before any answer byte is retried once on a new connection: 600 calls at 64 concurrent, all 200', async (t) => {
  const upstream = await oneShotUpstream();
  t.after(() => upstream.close());
  const dir = tempDir(t);
  const daemon = await startDaemon(path.join(dir, 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { rollout, url } = await client.request('startAgentRun', {});
  const statuses = new Map<number, number>();
  let next = 0;
  const calls = 600;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < calls) {
        next += 1;
        const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      }
    }),
  );
  assert.deepEqual([...statuses], [[200, calls]], `statuses: ${JSON.stringify([...statuses])}`);
  assert.ok(upstream.dropped() > 0, 'the upstream did drop reused connections (the retry was needed)');
  const detail = await client.request('getRollout', { id: rollout.id, spans: false });
  assert.equal(detail.rollout.llmCalls, calls, 'one record per call: a retried send is not a second call');
});
