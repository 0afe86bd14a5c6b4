/**
 * An OpenAI-compatible upstream streaming the shapes whose record is easy to get wrong (streamLimits.test.ts):
 * `framed-stream`, an answer of FRAMED_CONTENT_CHARS characters in 4-character events framed as OpenAI frames them
 * (id, model, fingerprint, indices, `obfuscation` padding), over the record's 8 MiB limit in SSE bytes and far
 * under it in content; `over-content`, 9 × 1,000,000 characters of content, over it; a legacy `functions` call
 * streamed as `function_call` deltas; and legacy `/completions` streamed with logprobs.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export const FRAMED_EVENTS = 60_000;
export const FRAMED_CONTENT_CHARS = FRAMED_EVENTS * 4;
export const OVER_CONTENT_CHARS = 9_000_000;
/** The legacy completion's tokens and their logprobs, as the upstream streams them one per event. */
export const COMPLETION_TOKENS = [' 4', '.'] as const;
export const COMPLETION_LOGPROBS = [-0.125, -0.5] as const;

export interface StreamShapesUpstream {
  readonly url: string;
  /** The SSE bytes of the last `framed-stream` sent. */
  readonly framedBytes: () => number;
  close(): Promise<void>;
}

const FRAME = {
  id: 'chatcmpl-BxQ2framedStream0123456789abc',
  object: 'chat.completion.chunk',
  created: 1764660000,
  model: 'gpt-4o-mini-2024-07-18',
  system_fingerprint: 'fp_560af6e559',
};

function chatEvent(delta: object, finish: string | null = null, padding = ''): string {
  const choice = { index: 0, delta, logprobs: null, finish_reason: finish };
  return `data: ${JSON.stringify({ ...FRAME, service_tier: 'default', choices: [choice], ...(padding ? { obfuscation: padding } : {}) })}\n\n`;
}

function stream(res: http.ServerResponse, events: Iterable<string>): number {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let bytes = 0;
  for (const event of events) {
    bytes += Buffer.byteLength(event);
    res.write(event);
  }
  res.end('data: [DONE]\n\n');
  return bytes;
}

function* framed(): Generator<string> {
  yield chatEvent({ role: 'assistant', content: '' });
  for (let i = 0; i < FRAMED_EVENTS; i += 1) yield chatEvent({ content: 'abcd' }, null, 'Zq8xW1');
  yield chatEvent({}, 'stop');
}

function* overContent(): Generator<string> {
  const piece = 'a'.repeat(1_000_000);
  for (let sent = 0; sent < OVER_CONTENT_CHARS; sent += piece.length) yield chatEvent({ content: piece });
  yield chatEvent({}, 'stop');
}

function* functionCall(): Generator<string> {
  yield chatEvent({ role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '' } });
  for (const piece of ['{"ci', 'ty":"Pa', 'ris"}']) yield chatEvent({ function_call: { arguments: piece } });
  yield chatEvent({}, 'function_call');
}

function* completion(): Generator<string> {
  let offset = 4;
  for (const [i, token] of COMPLETION_TOKENS.entries()) {
    const logprob = COMPLETION_LOGPROBS[i]!;
    const logprobs = {
      tokens: [token],
      token_logprobs: [logprob],
      top_logprobs: [{ [token]: logprob }],
      text_offset: [offset],
    };
    offset += token.length;
    yield `data: ${JSON.stringify({ id: 'cmpl-shapes', object: 'text_completion', created: 1, model: 'test-model', choices: [{ index: 0, text: token, logprobs, finish_reason: i === COMPLETION_TOKENS.length - 1 ? 'stop' : null }] })}\n\n`;
  }
}

export async function startStreamShapesUpstream(): Promise<StreamShapesUpstream> {
  let framedBytes = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as {
        model?: string;
        functions?: unknown;
      };
      if (req.url === '/v1/completions') return void stream(res, completion());
      if (body.model === 'framed-stream') framedBytes = stream(res, framed());
      else if (body.model === 'over-content') stream(res, overContent());
      else if (body.functions) stream(res, functionCall());
      else res.writeHead(404).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    framedBytes: () => framedBytes,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
