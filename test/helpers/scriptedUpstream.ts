/**
 * A scripted OpenAI-compatible upstream for tests (the *other side* of the proxy): chat completions, legacy
 * completions, the Responses API, embeddings and models, as JSON or SSE. When tools are offered and no tool result came
 * back yet it asks for a tool call, else it answers. Legacy `functions` are answered with a legacy `function_call`; `n`
 * gives that many choices (JSON); a `reasoning` model's Responses output starts with a reasoning item. Behaviour on
 * demand through the model name: `fail-500`, `fail-malformed`, `hang`, `gated` (the stream waits for `release()`
 * between chunks), `parallel` (two tool calls at once), `drop` (the stream breaks after its first chunk), `utf8` (an
 * answer whose multi-byte characters are split across network chunks). A test may also script chat completions itself
 * (`options.chat`): a function of the request body that returns the answer's text, a raw HTTP reply, or undefined for
 * the behaviour above. across network chunks), `constant-id` (every answer has the same id, as some local servers do),
 * `scripted…` (chat completions answer the texts given to `script()`, in order, e.g. an LLM judge's replies; the last
 * one repeats), `…logprobs…` (a chat answer asked for `logprobs` carries them, one entry a word: ANSWER_LOGPROBS, with
 * `top_logprobs` alternatives when asked).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { respondAnthropic, respondGemini } from './scriptedProviders';

export interface ReceivedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Record<string, unknown> | null;
}

export interface ScriptedUpstream {
  /** The OpenAI-compatible base URL (`…/v1`). */
  readonly url: string;
  /** The server's root: the base URL of the Anthropic and Gemini SDKs (scriptedProviders.ts). */
  readonly origin: string;
  readonly requests: ReceivedRequest[];
  /** Lets a `gated` stream send its next chunk. */
  release(): void;
  /** The assistant contents that `scripted…` models answer with, in order (the last one repeats). */
  script(replies: readonly string[]): void;
  /** Resolves when the upstream saw a request's connection close before it finished responding. */
  readonly aborted: Promise<void>;
  close(): Promise<void>;
}

export const ANSWER = 'It is sunny in Paris.';
/** The answer's tokens (a word each) and the logprobs a `…logprobs…` model gives them. */
export const ANSWER_TOKENS = ANSWER.split(' ').map((word, i) => (i ? ` ${word}` : word));
export const ANSWER_LOGPROBS = ANSWER_TOKENS.map((_, i) => -(i + 1) / 8);

/** Chat logprobs for `tokens` (from `first` in ANSWER_TOKENS), as OpenAI sends them. */
function chatLogprobs(tokens: readonly string[], first: number, top: number): object {
  const entry = (token: string, logprob: number): object => ({
    token,
    logprob,
    bytes: [...Buffer.from(token)],
  });
  return {
    content: tokens.map((token, i) => ({
      ...entry(token, ANSWER_LOGPROBS[first + i]!),
      top_logprobs: [entry(token, ANSWER_LOGPROBS[first + i]!), entry(' token', -4)].slice(0, top),
    })),
    refusal: null,
  };
}
/** The summary of the reasoning item a `reasoning` model's Responses output starts with. */
export const REASONING = 'The user asks for the weather: the tool knows it.';

/** A scripted chat answer: its text, a raw reply (status and body), or undefined for the default behaviour. */
export type ChatScript = (body: Record<string, unknown>) => string | { status: number; body: string } | undefined;

export interface ScriptedUpstreamOptions {
  readonly chat?: ChatScript;
}

type Message = { role?: string; type?: string };

function wantsTool(body: Record<string, unknown>): boolean {
  // Legacy `functions` count as tools, and a `function` message as their result.
  const tools = (body.tools ?? body.functions) as unknown[] | undefined;
  const messages = (body.messages ?? body.input) as Message[] | string | undefined;
  const last = Array.isArray(messages) ? messages.at(-1) : undefined;
  return (
    Array.isArray(tools) &&
    tools.length > 0 &&
    !(last?.role === 'tool' || last?.role === 'function' || last?.type === 'function_call_output')
  );
}

function toolCalls(parallel: boolean): Array<{ id: string; name: string; arguments: string }> {
  const calls = [{ id: 'call_paris', name: 'get_weather', arguments: '{"city":"Paris"}' }];
  if (parallel) calls.push({ id: 'call_oslo', name: 'get_weather', arguments: '{"city":"Oslo"}' });
  return calls;
}

export async function startScriptedUpstream(script: ScriptedUpstreamOptions = {}): Promise<ScriptedUpstream> {
  const requests: ReceivedRequest[] = [];
  let gate: Array<() => void> = [];
  let pendingReleases = 0;
  let onAbort: () => void = () => {};
  const aborted = new Promise<void>((resolve) => (onAbort = resolve));
  const waitGate = (): Promise<void> =>
    new Promise((resolve) => {
      if (pendingReleases > 0) {
        pendingReleases -= 1;
        resolve();
      } else gate.push(resolve);
    });
  let counter = 0;
  let scripted: string[] = [];

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: Record<string, unknown> | null;
      try {
        body = raw ? (JSON.parse(raw) as Record<string, unknown>) : null;
      } catch {
        body = null;
      }
      requests.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body });
      res.on('close', () => {
        if (!res.writableFinished) onAbort();
      });
      if (
        respondAnthropic(req.url ?? '', req.headers, body ?? {}, res) ||
        respondGemini(req.url ?? '', body ?? {}, res)
      )
        return;
      void respond(req.url ?? '', body ?? {}, res);
    });
  });

  async function respond(path: string, body: Record<string, unknown>, res: http.ServerResponse): Promise<void> {
    const model = String(body.model ?? 'test-model');
    const json = (status: number, value: unknown): void => {
      const text = JSON.stringify(value);
      res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req_${counter}` });
      res.end(text);
    };
    counter += 1;
    const id = model.includes('constant-id') ? 'chatcmpl-constant' : `chatcmpl-${counter}`;
    if (model === 'fail-500') return json(500, { error: { message: 'the model is overloaded', type: 'server_error' } });
    if (model === 'fail-malformed') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end('{"id": "broken", "choices": [');
    }
    if (model === 'hang') return;
    if (model.startsWith('scripted') && path.endsWith('/chat/completions')) {
      const content = scripted.length > 1 ? scripted.shift()! : (scripted[0] ?? '');
      return json(200, {
        id,
        object: 'chat.completion',
        created: 1,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 },
      });
    }
    if (model === 'drop') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model, choices: [{ index: 0, delta: { role: 'assistant', content: 'Par' }, finish_reason: null }] })}\n\n`,
      );
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    if (model === 'utf8') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const event = Buffer.from(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model, choices: [{ index: 0, delta: { role: 'assistant', content: 'Zürich ☀️ 24°C' }, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`,
      );
      const cut = event.indexOf(Buffer.from('☀')) + 1;
      res.write(event.subarray(0, cut));
      setTimeout(() => res.end(event.subarray(cut)), 20);
      return;
    }
    const fromScript = path.endsWith('/chat/completions') && !body.stream ? script.chat?.(body) : undefined;
    if (typeof fromScript === 'string') {
      return json(200, {
        id,
        object: 'chat.completion',
        created: 1,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: fromScript }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
      });
    }
    if (fromScript) {
      res.writeHead(fromScript.status, { 'content-type': 'application/json' });
      return void res.end(fromScript.body);
    }
    if (path.endsWith('/models'))
      return json(200, { object: 'list', data: [{ id: 'test-model', object: 'model', owned_by: 'tests' }] });
    if (path.endsWith('/embeddings'))
      return json(200, {
        object: 'list',
        data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2, 0.3] }],
        model,
        usage: { prompt_tokens: 3, total_tokens: 3 },
      });
    const usage = { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 };
    const calls = wantsTool(body) ? toolCalls(model.includes('parallel')) : [];
    const tokenIds = body.return_token_ids === true ? { prompt_token_ids: [1, 2, 3], token_ids: [4, 5] } : undefined;

    if (path.endsWith('/responses')) {
      // `reasoning`: a reasoning item (with its summary) before the output, as reasoning models answer.
      const reasoning = model.includes('reasoning')
        ? [{ type: 'reasoning', id: `rs_${counter}`, summary: [{ type: 'summary_text', text: REASONING }] }]
        : [];
      const output: object[] = [
        ...reasoning,
        ...(calls.length
          ? calls.map((call, i) => ({
              type: 'function_call',
              id: `fc_${i}`,
              call_id: call.id,
              name: call.name,
              arguments: call.arguments,
              status: 'completed',
            }))
          : [
              {
                type: 'message',
                id: 'msg_1',
                role: 'assistant',
                status: 'completed',
                content: [{ type: 'output_text', text: ANSWER, annotations: [] }],
              },
            ]),
      ];
      const response = {
        id: model.includes('constant-id') ? 'resp_constant' : `resp_${counter}`,
        object: 'response',
        created_at: 1,
        status: 'completed',
        model,
        output,
        usage: { input_tokens: 12, output_tokens: 7, total_tokens: 19 },
      };
      if (!body.stream) return json(200, response);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const send = (type: string, extra: object): void =>
        void res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...extra })}\n\n`);
      send('response.created', { response: { ...response, status: 'in_progress', output: [] } });
      if (!calls.length)
        for (const word of ANSWER.split(' '))
          send('response.output_text.delta', {
            item_id: 'msg_1',
            output_index: 0,
            content_index: 0,
            delta: `${word} `,
          });
      send('response.completed', { response });
      return void res.end();
    }

    if (path.endsWith('/completions') && !path.endsWith('/chat/completions')) {
      return json(200, {
        id: `cmpl-${counter}`,
        object: 'text_completion',
        model,
        choices: [{ index: 0, text: ' 4', finish_reason: 'stop' }],
        usage,
      });
    }

    // Legacy `functions` get a legacy `function_call` (one call, no id), as OpenAI answered them.
    const legacy = Array.isArray(body.functions) && calls.length > 0;
    const message = legacy
      ? { role: 'assistant', content: null, function_call: { name: calls[0]!.name, arguments: calls[0]!.arguments } }
      : calls.length
        ? {
            role: 'assistant',
            content: null,
            tool_calls: calls.map((c) => ({
              id: c.id,
              type: 'function',
              function: { name: c.name, arguments: c.arguments },
            })),
          }
        : { role: 'assistant', content: ANSWER };
    const finish = legacy ? 'function_call' : calls.length ? 'tool_calls' : 'stop';
    const top = typeof body.top_logprobs === 'number' ? body.top_logprobs : 0;
    const logprobs = (first: number, tokens: readonly string[]): object =>
      model.includes('logprobs') && body.logprobs === true && !calls.length
        ? { logprobs: chatLogprobs(tokens, first, top) }
        : {};
    if (!body.stream) {
      // `n`: that many choices; the second and later ones say which they are.
      const choices = Array.from({ length: typeof body.n === 'number' ? body.n : 1 }, (_, index) => ({
        index,
        message: index === 0 || calls.length ? message : { role: 'assistant', content: `${ANSWER} (choice ${index})` },
        ...(index === 0 ? logprobs(0, ANSWER_TOKENS) : {}),
        finish_reason: finish,
        ...(tokenIds ? { token_ids: tokenIds.token_ids } : {}),
      }));
      return json(200, {
        id,
        object: 'chat.completion',
        created: 1,
        model,
        ...(tokenIds ? { prompt_token_ids: tokenIds.prompt_token_ids } : {}),
        choices,
        usage,
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const chunk = async (
      delta: object,
      finishReason: string | null = null,
      choiceExtra: object = {},
    ): Promise<void> => {
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, ...choiceExtra, finish_reason: finishReason }] })}\n\n`,
      );
      if (model === 'gated') await waitGate();
    };
    await chunk({ role: 'assistant', content: calls.length ? null : '' });
    if (legacy) {
      const call = calls[0]!;
      const half = Math.floor(call.arguments.length / 2);
      await chunk({ function_call: { name: call.name, arguments: '' } });
      await chunk({ function_call: { arguments: call.arguments.slice(0, half) } });
      await chunk({ function_call: { arguments: call.arguments.slice(half) } });
    } else if (calls.length) {
      // Arguments arrive in pieces, and parallel calls interleave: the proxy must merge by index.
      for (const [index, call] of calls.entries())
        await chunk({
          tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }],
        });
      for (const [index, call] of calls.entries()) {
        const half = Math.floor(call.arguments.length / 2);
        await chunk({ tool_calls: [{ index, function: { arguments: call.arguments.slice(0, half) } }] });
      }
      for (const [index, call] of calls.entries()) {
        const half = Math.floor(call.arguments.length / 2);
        await chunk({ tool_calls: [{ index, function: { arguments: call.arguments.slice(half) } }] });
      }
    } else {
      for (const [i, token] of ANSWER_TOKENS.entries()) await chunk({ content: token }, null, logprobs(i, [token]));
    }
    await chunk({}, finish);
    const options = body.stream_options as { include_usage?: boolean } | undefined;
    if (options?.include_usage)
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [], usage })}\n\n`,
      );
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    origin: `http://127.0.0.1:${port}`,
    requests,
    aborted,
    script: (replies) => {
      scripted = [...replies];
    },
    release: () => {
      const next = gate.shift();
      if (next) next();
      else pendingReleases += 1;
    },
    close: () =>
      new Promise((resolve) => {
        gate.forEach((resolveGate) => resolveGate());
        gate = [];
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
