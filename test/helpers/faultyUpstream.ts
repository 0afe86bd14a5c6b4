/**
 * A scripted upstream that fails on demand, in front of the scripted one (scriptedUpstream.ts):
 * by the request's model name (the body's `model`, or Gemini's `/models/{model}:…` path), `flaky-429…` / `flaky-500…` fail the first call of each model and API with that
 * status (in the API's own error shape, with a short `retry-after-ms`, so SDKs retry at once), then
 * pass; `cancel-stream` starts a stream and holds it open until the client goes away; `long-stream`
 * streams `LONG_STREAM_CHARS` characters of content, past the record's limit. Everything else, and
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

function errorBody(path: string, status: number): string {
  const message = status === 429 ? 'rate limited, retry shortly' : 'the model is overloaded';
  if (path.startsWith('/v1/messages'))
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

/** One SSE event of content in the API's own stream shape (Gemini's or chat completions'). */
function chunk(path: string, model: string, content: string, finish: string | null = null): string {
  if (GEMINI_PATH.test(path)) {
    return `data: ${JSON.stringify({ responseId: 'gemini-long', modelVersion: model, candidates: [{ index: 0, content: { role: 'model', parts: content ? [{ text: content }] : [] }, ...(finish ? { finishReason: 'STOP' } : {}) }] })}\r\n\r\n`;
  }
  return `data: ${JSON.stringify({ id: 'chatcmpl-long', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
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
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(chunk(path, model, 'It is'));
        res.on('close', () => onCancel());
        return;
      }
      if (model === 'long-stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const piece = 'a'.repeat(1_000_000);
        for (let sent = 0; sent < LONG_STREAM_CHARS; sent += piece.length) res.write(chunk(path, model, piece));
        res.write(chunk(path, model, '', 'stop'));
        res.end(GEMINI_PATH.test(path) ? '' : 'data: [DONE]\n\n');
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
