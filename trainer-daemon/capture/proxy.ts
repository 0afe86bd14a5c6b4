/**
 * The recording OpenAI-compatible proxy. A call is forwarded to the rollout's upstream with the
 * agent's own headers; the agent gets the upstream's status, headers and body unchanged. Server-
 * sent events are written to the agent as each chunk arrives (no buffering) while a parser
 * reassembles the response for the record. A client that goes away aborts the upstream request.
 * Every call, failed ones included, becomes one `llm` span of the rollout.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { createParser } from 'eventsource-parser';
import { PLACEHOLDER_API_KEY, type Json } from '../protocol';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import type { Logger } from '../log';
import { callToSpan, type CallRecord } from './record';
import { StreamReassembler, type Api } from './reassemble';

type JsonObject = { [key: string]: Json };

/** The upstream sent nothing within the timeout (HTTP 504, where other failures are 502). */
class UpstreamTimeoutError extends Error {}

export interface UpstreamConfig {
  /** Base URL of the default upstream, e.g. `https://api.openai.com/v1`. */
  readonly baseUrl: string;
  /** Sent when the agent has no key of its own (never stored, never logged). */
  readonly apiKey: string | undefined;
  /** Upstream response timeout (no bytes for this long). */
  readonly timeoutMs: number;
}

export interface ProxyCall {
  readonly rolloutId: string;
  readonly callIndex: number;
  /** The rollout's own upstream (the agent's original OPENAI_BASE_URL), else the default. */
  readonly upstream: string | null;
  readonly api: Api | null;
  /** Path after `/v1`, with the query string, e.g. `/chat/completions`. */
  readonly path: string;
  /** What is sent upstream: the agent's body, or it with engine token ids requested. */
  readonly body: Buffer;
  /** The agent's own request, as recorded. */
  readonly json: JsonObject | null;
  readonly tokenIdsRequested: boolean;
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'content-length', 'accept-encoding']);
const keepAlive = { http: new http.Agent({ keepAlive: true, maxSockets: 512 }), https: new https.Agent({ keepAlive: true, maxSockets: 512 }) };

/**
 * The agent's headers for the upstream. The placeholder key never leaves the daemon. The daemon's
 * own key is added only for the daemon's own upstream, and only when the agent sent no key of its
 * own (Authorization or Azure-style api-key): a user's gateway or local server never receives it.
 */
function upstreamHeaders(request: IncomingMessage, config: UpstreamConfig, rolloutUpstream: boolean, bodyLength: number): http.OutgoingHttpHeaders {
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  }
  if (headers.authorization === `Bearer ${PLACEHOLDER_API_KEY}`) delete headers.authorization;
  if (headers['api-key'] === PLACEHOLDER_API_KEY) delete headers['api-key'];
  const agentHasKey = headers.authorization !== undefined || headers['api-key'] !== undefined;
  if (!agentHasKey && !rolloutUpstream && config.apiKey) headers.authorization = `Bearer ${config.apiKey}`;
  // Identity encoding, so the record can read the body; it is forwarded byte for byte.
  headers['accept-encoding'] = 'identity';
  headers['content-length'] = bodyLength;
  return headers;
}

function sendError(response: ServerResponse, status: number, type: string, message: string): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const body = JSON.stringify({ error: { message, type, code: type } });
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  response.end(body);
}

export class RecordingProxy {
  constructor(
    private readonly config: UpstreamConfig,
    private readonly record: (span: ReturnType<typeof callToSpan>, rolloutId: string) => void,
    private readonly logger: Logger,
  ) {}

  /** Forwards one call; resolves when the agent's response has ended (and the call was recorded). */
  forward(call: ProxyCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    const base = (call.upstream ?? this.config.baseUrl).replace(/\/+$/, '');
    const target = new URL(`${base}${call.path}`);
    const startMs = Date.now();
    let firstByteMs: number | null = null;
    const reassembler = call.api ? new StreamReassembler(call.api) : undefined;
    const chunks: Buffer[] = [];
    let streamed = false;
    let status: number | null = null;

    return new Promise<void>((resolve) => {
      let finished = false;
      const finish = (error: string | null, responseJson: JsonObject | null): void => {
        if (finished) return;
        finished = true;
        if (call.api && call.json) {
          const record: CallRecord = {
            api: call.api, rolloutId: call.rolloutId, callIndex: call.callIndex, upstream: redactUrl(base),
            request: call.json, response: responseJson, status, streamed, startMs, endMs: Date.now(), firstByteMs, error, tokenIdsRequested: call.tokenIdsRequested,
            traceparent: typeof request.headers.traceparent === 'string' ? request.headers.traceparent : undefined,
          };
          this.record(callToSpan(record), call.rolloutId);
        }
        resolve();
      };

      const transport = target.protocol === 'https:' ? https : http;
      const upstream = transport.request(target, {
        method: request.method,
        headers: upstreamHeaders(request, this.config, call.upstream !== null, call.body.length),
        agent: target.protocol === 'https:' ? keepAlive.https : keepAlive.http,
        timeout: this.config.timeoutMs,
      });

      // The agent went away before the response ended: stop the upstream work too.
      response.on('close', () => {
        if (!response.writableFinished) {
          upstream.destroy();
          finish('cancelled: the client disconnected before the response ended', reassembler && streamed ? reassembler.result() : null);
        }
      });
      upstream.on('timeout', () => upstream.destroy(new UpstreamTimeoutError(`no response from the upstream within ${this.config.timeoutMs} ms`)));
      upstream.on('error', (error) => {
        if (finished) return;
        const message = `Lightning could not get a response from the upstream ${redactUrl(base)}: ${errorMessage(error)}`;
        this.logger.warn('upstream request failed', { upstream: redactUrl(base), error: errorMessage(error) });
        sendError(response, error instanceof UpstreamTimeoutError ? 504 : 502, 'upstream_unavailable', message);
        finish(message, reassembler && streamed ? reassembler.result() : null);
      });

      upstream.on('response', (upstreamResponse) => {
        status = upstreamResponse.statusCode ?? 502;
        streamed = String(upstreamResponse.headers['content-type'] ?? '').includes('text/event-stream');
        const headers: http.OutgoingHttpHeaders = {};
        for (const [name, value] of Object.entries(upstreamResponse.headers)) {
          if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
        }
        if (streamed) {
          response.writeHead(status, headers);
          response.flushHeaders();
          const parser = createParser({
            onEvent: (event) => {
              if (event.data === '[DONE]' || !reassembler) return;
              try {
                reassembler.add(JSON.parse(event.data));
              } catch {
                reassembler.error ??= 'the upstream sent an event that is not JSON';
              }
            },
          });
          // A character split across two network chunks must not be split in the record.
          const utf8 = new StringDecoder('utf8');
          let ended = false;
          upstreamResponse.on('data', (chunk: Buffer) => {
            firstByteMs ??= Date.now();
            // Backpressure: a slow agent slows the upstream read instead of growing memory.
            if (!response.write(chunk)) {
              upstreamResponse.pause();
              response.once('drain', () => upstreamResponse.resume());
            }
            parser.feed(utf8.write(chunk));
          });
          upstreamResponse.on('end', () => {
            ended = true;
            parser.feed(utf8.end());
            const result = reassembler?.result() ?? null;
            const error = status! >= 400 ? `upstream HTTP ${status}` : (reassembler?.error ?? null);
            finish(error, result);
            response.end();
          });
          // The upstream dropped the stream: the agent must not wait forever, and the call is recorded.
          upstreamResponse.on('close', () => {
            if (ended || finished) return;
            finish('the upstream stream broke before it ended', reassembler?.result() ?? null);
            response.destroy();
          });
          return;
        }
        upstreamResponse.on('data', (chunk: Buffer) => {
          firstByteMs ??= Date.now();
          chunks.push(chunk);
        });
        upstreamResponse.on('end', () => {
          const body = Buffer.concat(chunks);
          let parsed: unknown;
          let malformed = false;
          if (String(upstreamResponse.headers['content-type'] ?? '').includes('json') || body.length > 0) {
            try {
              parsed = JSON.parse(body.toString('utf8'));
            } catch {
              malformed = status! < 400;
            }
          }
          if (malformed) {
            const message = `the upstream ${redactUrl(base)} answered HTTP ${status} with a body that is not JSON`;
            sendError(response, 502, 'upstream_malformed_response', message);
            finish(message, null);
            return;
          }
          const json = parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as JsonObject) : null;
          const error = status! >= 400 ? `upstream HTTP ${status}: ${upstreamErrorMessage(json) ?? body.toString('utf8').slice(0, 500)}` : null;
          response.writeHead(status!, { ...headers, 'content-length': body.length });
          response.end(body);
          // In the same turn of the event loop as the response: the record is queued before the
          // agent's next request (or `lightning run` finishing the rollout) can be handled.
          finish(error, json);
        });
        const broke = (reason: string): void => {
          if (finished) return;
          sendError(response, 502, 'upstream_unavailable', `the upstream connection broke: ${reason}`);
          finish(`the upstream connection broke: ${reason}`, null);
        };
        upstreamResponse.on('error', (error) => broke(errorMessage(error)));
        upstreamResponse.on('close', () => {
          if (!upstreamResponse.complete) broke('the response ended early');
        });
      });

      upstream.end(call.body);
    });
  }
}

function upstreamErrorMessage(json: JsonObject | null): string | undefined {
  const error = json?.error;
  if (error && typeof error === 'object' && !Array.isArray(error) && typeof error.message === 'string') return error.message;
  return typeof error === 'string' ? error : undefined;
}
