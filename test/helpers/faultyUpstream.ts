/**
 * A scripted upstream that fails on demand, in front of the scripted one (scriptedUpstream.ts):
 * by the request's model name (the body's `model`, or Gemini's `/models/{model}:…` path), `flaky-429…` / `flaky-500…`
 * fail the first call of each model and API with that status (in the API's own error shape, with a short
 * `retry-after-ms`, so SDKs retry at once), then pass; `cancel-stream` starts a stream and holds it open until the
 * client goes away; `long-stream` streams `LONG_STREAM_CHARS` characters of content, past the record's limit. Both
 * streams are in the API's own shape: chat completions, Anthropic Messages or Gemini. Everything else, and
 * each retry, is forwarded to the scripted upstream unchanged.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ScriptedUpstream } from './scriptedUpstream';

/** Past RECORD_LIMITS.maxRecordChars (8 MiB), in 1,000,000-character pieces. */
export const LONG_STREAM_CHARS = 9_000_000;

export interface FaultyUpstream {
  readonly url: string;
  readonly origin: string;
  /** Resolves once a `cancel-stream` client went away mid-stream. */
  readonly cancelled: Promise<void>;
  close(): Promise<void>;
}

const isAnthropic = (path: string): boolean => /^(\/v1)?\/messages\b/.test(path);

function errorBody(path: string, status: number): string {
  const message = status === 429 ? 'rate limited, retry shortly' : 'the model is overloaded';
  if (isAnthropic(path))
    return JSON.stringify({
      type: 'error',
      error: { type: status === 429 ? 'rate_limit_error' : 'api_error', message },
    });
  if (path.includes(':generateContent') || path.includes(':streamGenerateContent'))
    return JSON.stringify({
      error: { code: status, message, status: status === 429 ? 'RESOURCE_EXHAUSTED' : 'INTERNAL' },
    });
  return JSON.stringify({ error: { message, type: status === 429 ? 'rate_limit_exceeded' : 'server_error' } });
}

const GEMINI_PATH = /\/models\/([^:/?]+):(?:generateContent|streamGenerateContent)/;

/**
 * A stream in the API's own shape (Anthropic's, Gemini's or chat completions'): its opening, content and end events.
 */
interface StreamShape {
  readonly start: string;
  content(text: string): string;
  readonly end: string;
}

function anthropicEvent(type: string, data: object): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

function streamShape(path: string, model: string): StreamShape {
  if (isAnthropic(path)) {
    const message = { id: 'msg_long', type: 'message', role: 'assistant', model, content: [] };
    return {
      start:
        anthropicEvent('message_start', {
          message: {
            ...message,
            stop_reason: null,
            stop_sequence: null,
            usage: { input_tokens: 12, output_tokens: 1 },
          },
        }) + anthropicEvent('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      content: (text) => anthropicEvent('content_block_delta', { index: 0, delta: { type: 'text_delta', text } }),
      end:
        anthropicEvent('content_block_stop', { index: 0 }) +
        anthropicEvent('message_delta', {
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 7 },
        }) +
        anthropicEvent('message_stop', {}),
    };
  }
  if (GEMINI_PATH.test(path)) {
    const event = (parts: object[], finish: boolean): string =>
      `data: ${JSON.stringify({ responseId: 'gemini-long', modelVersion: model, candidates: [{ index: 0, content: { role: 'model', parts }, ...(finish ? { finishReason: 'STOP' } : {}) }] })}\r\n\r\n`;
    return { start: '', content: (text) => event([{ text }], false), end: event([], true) };
  }
  const event = (delta: object, finish: string | null): string =>
    `data: ${JSON.stringify({ id: 'chatcmpl-long', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  return { start: '', content: (content) => event({ content }, null), end: `${event({}, 'stop')}data: [DONE]\n\n` };
}

export async function startFaultyUpstream(scripted: ScriptedUpstream): Promise<FaultyUpstream> {
  const failed = new Set<string>();
  let onCancel: () => void = () => {};
  const cancelled = new Promise<void>((resolve) => (onCancel = resolve));
  const target = new URL(scripted.origin);

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (piece: Buffer) => chunks.push(piece));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let model: string;
      try {
        model = String((JSON.parse(raw.toString('utf8') || '{}') as { model?: unknown }).model ?? '');
      } catch {
        model = '';
      }
      const path = req.url ?? '/';
      model ||= decodeURIComponent(GEMINI_PATH.exec(path)?.[1] ?? '');
      const flaky = /^flaky-(429|500)\b/.exec(model);
      const key = `${model} ${path.split('?')[0]}`;
      if (flaky && !failed.has(key)) {
        failed.add(key);
        const body = errorBody(path, Number(flaky[1]));
        res.writeHead(Number(flaky[1]), {
          'content-type': 'application/json',
          'retry-after-ms': '10',
          'content-length': Buffer.byteLength(body),
        });
        res.end(body);
        return;
      }
      if (model === 'cancel-stream') {
        const shape = streamShape(path, model);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(shape.start + shape.content('It is'));
        res.on('close', () => onCancel());
        return;
      }
      if (model === 'long-stream') {
        const shape = streamShape(path, model);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(shape.start);
        const piece = shape.content('a'.repeat(1_000_000));
        for (let sent = 0; sent < LONG_STREAM_CHARS; sent += 1_000_000) res.write(piece);
        res.end(shape.end);
        return;
      }
      const forwarded = http.request(
        {
          host: target.hostname,
          port: target.port,
          path,
          method: req.method,
          headers: { ...req.headers, host: target.host },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      forwarded.on('error', () => res.destroy());
      forwarded.end(raw);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    origin: `http://127.0.0.1:${port}`,
    cancelled,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
