/**
 * The Anthropic Messages API and the Gemini API of the scripted upstream (scriptedUpstream.ts), as
 * their real SDKs expect them, JSON and server-sent events. When tools are offered and no tool
 * result came back yet the model asks for `get_weather({"city":"Paris"})`, else it answers ANSWER.
 * Behaviour on demand through the model name: `fail-500` (an API error in the provider's shape),
 * `stream-error` (Anthropic: an `error` event mid-stream), `constant-id` (every answer has the
 * same id), `thinking` (Anthropic: a thinking and a redacted_thinking block before the answer),
 * `credential-fields` (Anthropic: a tool_use whose input keys are `password` and `token`), `parallel`
 * (Gemini: `get_weather` called twice in one turn, for Paris and Oslo).
 */
import type http from 'node:http';

type Body = Record<string, unknown>;

export const PROVIDER_ANSWER = 'It is sunny in Paris.';

let counter = 0;

function json(res: http.ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${counter}` });
  res.end(JSON.stringify(value));
}

// ---------------------------------------------------------------------------------------------
// Anthropic

function anthropicWantsTool(body: Body): boolean {
  const messages = (body.messages ?? []) as Array<{ role: string; content: unknown }>;
  const last = messages.at(-1);
  const hasResult =
    Array.isArray(last?.content) &&
    (last.content as Array<{ type?: string }>).some((block) => block.type === 'tool_result');
  return Array.isArray(body.tools) && body.tools.length > 0 && !hasResult;
}

function anthropicMessage(body: Body): Record<string, unknown> {
  const model = String(body.model);
  const content: Array<Record<string, unknown>> = [];
  if (model.includes('thinking')) {
    content.push({
      type: 'thinking',
      thinking: 'The user wants the weather; I should use the tool.',
      signature: 'sig-abc',
    });
    content.push({ type: 'redacted_thinking', data: 'cmVkYWN0ZWQ=' });
  }
  // `credential-fields`: a tool input whose keys are named like credentials (they are content, and must stay).
  if (anthropicWantsTool(body) && model.includes('credential-fields'))
    content.push({
      type: 'tool_use',
      id: `toolu_login_${counter}`,
      name: 'login',
      input: { password: 'correct horse battery staple', token: 'the token the user typed' },
    });
  else if (anthropicWantsTool(body))
    content.push({ type: 'tool_use', id: `toolu_paris_${counter}`, name: 'get_weather', input: { city: 'Paris' } });
  else content.push({ type: 'text', text: PROVIDER_ANSWER });
  return {
    id: model.includes('constant-id') ? 'msg_constant' : `msg_${counter}`,
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 12, cache_creation_input_tokens: 3, cache_read_input_tokens: 5, output_tokens: 7 },
  };
}

function anthropicStream(res: http.ServerResponse, message: Record<string, unknown>, failMidway: boolean): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const send = (type: string, data: object): void =>
    void res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  const usage = message.usage as Record<string, number>;
  send('message_start', {
    message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
  });
  send('ping', {});
  (message.content as Array<Record<string, unknown>>).forEach((block, index) => {
    if (block.type === 'text') {
      send('content_block_start', { index, content_block: { type: 'text', text: '' } });
      for (const [i, word] of String(block.text).split(' ').entries()) {
        send('content_block_delta', { index, delta: { type: 'text_delta', text: (i ? ' ' : '') + word } });
        if (failMidway) {
          send('error', { error: { type: 'overloaded_error', message: 'Overloaded' } });
          res.end();
          failMidway = false;
          return;
        }
      }
    } else if (block.type === 'tool_use') {
      send('content_block_start', { index, content_block: { ...block, input: {} } });
      const text = JSON.stringify(block.input);
      const half = Math.floor(text.length / 2);
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: text.slice(0, half) } });
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: text.slice(half) } });
    } else if (block.type === 'thinking') {
      send('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
      send('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: String(block.thinking) } });
      send('content_block_delta', { index, delta: { type: 'signature_delta', signature: String(block.signature) } });
    } else {
      send('content_block_start', { index, content_block: block });
    }
    send('content_block_stop', { index });
  });
  if (res.writableEnded) return;
  send('message_delta', {
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  });
  send('message_stop', {});
  res.end();
}

/** Answers `/v1/messages`, `/v1/messages/count_tokens` and `/v1/models` (true), or leaves the request (false). */
export function respondAnthropic(
  path: string,
  headers: http.IncomingHttpHeaders,
  body: Body,
  res: http.ServerResponse,
): boolean {
  const route = path.split('?')[0]!;
  if (route === '/v1/models' && headers['anthropic-version']) {
    json(res, 200, {
      data: [{ id: 'claude-test', type: 'model', display_name: 'Claude Test', created_at: '2025-01-01T00:00:00Z' }],
      has_more: false,
      first_id: 'claude-test',
      last_id: 'claude-test',
    });
    return true;
  }
  if (route === '/v1/messages/count_tokens') {
    json(res, 200, { input_tokens: 42 });
    return true;
  }
  if (route !== '/v1/messages') return false;
  counter += 1;
  const model = String(body.model ?? '');
  if (model === 'fail-500') {
    json(res, 500, { type: 'error', error: { type: 'api_error', message: 'the model is overloaded' } });
    return true;
  }
  const message = anthropicMessage(body);
  if (body.stream === true) anthropicStream(res, message, model === 'stream-error');
  else json(res, 200, message);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Gemini

type GeminiContent = { role?: string; parts?: Array<Record<string, unknown>> };

function geminiWantsTool(body: Body): boolean {
  const contents = (body.contents ?? []) as GeminiContent[];
  const last = contents.at(-1);
  const hasResult = last?.parts?.some((part) => part.functionResponse !== undefined) ?? false;
  const tools = (body.tools ?? []) as Array<{ functionDeclarations?: unknown[] }>;
  return tools.some((tool) => (tool.functionDeclarations ?? []).length > 0) && !hasResult;
}

/** Answers `/v1beta/models/{m}:generateContent` and `:streamGenerateContent` (true), or leaves the request (false). */
export function respondGemini(path: string, body: Body, res: http.ServerResponse): boolean {
  const match = /^\/v1beta\/models\/([^:/?]+):(generateContent|streamGenerateContent)(\?.*)?$/.exec(path);
  if (!match) return false;
  counter += 1;
  const model = decodeURIComponent(match[1]!);
  if (model === 'fail-500') {
    json(res, 500, { error: { code: 500, message: 'the model is overloaded', status: 'INTERNAL' } });
    return true;
  }
  const usageMetadata = { promptTokenCount: 12, candidatesTokenCount: 7, totalTokenCount: 19 };
  const responseId = model.includes('constant-id') ? 'gemini-constant' : `gemini-${counter}`;
  // `parallel`: the same function called twice in one turn (Gemini sends no call ids).
  const calls = model.includes('parallel') ? ['Paris', 'Oslo'] : ['Paris'];
  const parts = geminiWantsTool(body)
    ? calls.map((city) => ({ functionCall: { name: 'get_weather', args: { city } } }))
    : [{ text: PROVIDER_ANSWER }];
  const whole = {
    candidates: [{ content: { role: 'model', parts }, finishReason: 'STOP', index: 0 }],
    usageMetadata,
    modelVersion: model,
    responseId,
  };
  if (match[2] === 'generateContent') {
    json(res, 200, whole);
    return true;
  }
  const chunks =
    'text' in parts[0]! ? PROVIDER_ANSWER.split(' ').map((word, i) => [{ text: (i ? ' ' : '') + word }]) : [parts];
  const events = chunks.map((chunkParts, i) => ({
    candidates: [
      {
        content: { role: 'model', parts: chunkParts },
        index: 0,
        ...(i === chunks.length - 1 ? { finishReason: 'STOP' } : {}),
      },
    ],
    ...(i === chunks.length - 1 ? { usageMetadata } : {}),
    modelVersion: model,
    responseId,
  }));
  if (!(match[3] ?? '').includes('alt=sse')) {
    json(res, 200, events);
    return true;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const event of events) res.write(`data: ${JSON.stringify(event)}\r\n\r\n`);
  res.end();
  return true;
}
