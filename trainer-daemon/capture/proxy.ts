/**
 * The recording OpenAI-compatible proxy. A call is forwarded to the rollout's upstream with the
 * agent's own headers; the agent gets the upstream's status, headers and body unchanged. Server-
 * sent events are written to the agent as each chunk arrives (no buffering) while a parser
 * reassembles the response for the record. A client that goes away aborts the upstream request.
 * Every call, failed ones included, becomes one `llm` span of the rollout.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import zlib from 'node:zlib';
import { PLACEHOLDER_API_KEY, type CallOutcome, type Json, type ProviderName } from '../protocol';
import { errorMessage } from '../protocol/errors';
import { RECORD_LIMITS, redactUrl } from '../protocol/secrets';
import type { Logger } from '../log';
import type { ByteBudget } from './byteBudget';
import { callToSpan, type CallRecord } from './record';
import { StreamReassembler, type Api, type Reassembler } from './reassemble';
import { AnthropicReassembler } from './anthropic';
import { GeminiReassembler } from './gemini';
import { RetryLinker, sdkRetryCount } from './retries';
import { streamContentChars } from './streamContent';
import { MAX_SSE_EVENT_CHARS, SseParser } from './sseParser';
import { maxUpstreamBodyBytes } from '../util/boundedBody';

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
  /** The Anthropic and Gemini upstreams for rollouts without their own (default: the providers'). */
  readonly providers?: Partial<Record<ProviderName, string>>;
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
  /** The model, where the API names it outside the body (Gemini: in the URL). */
  readonly model?: string;
  /** The body of an error the daemon itself answers, in the API's own shape; default OpenAI's. */
  readonly errorBody?: (status: number, type: string, message: string) => Json;
}

export function reassemblerFor(api: Api): Reassembler {
  if (api === 'anthropic.messages') return new AnthropicReassembler();
  if (api === 'gemini.generate_content') return new GeminiReassembler();
  return new StreamReassembler(api);
}

/** A non-streamed LLM answer is JSON of at most a few MB; past this it is refused (502), not buffered. */
const MAX_UPSTREAM_BODY_BYTES = maxUpstreamBodyBytes();

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'accept-encoding',
]);
const UPSTREAM_SOCKETS = 512;
const keepAlive = {
  http: new http.Agent({ keepAlive: true, maxSockets: UPSTREAM_SOCKETS }),
  https: new https.Agent({ keepAlive: true, maxSockets: UPSTREAM_SOCKETS }),
};
const MAX_CALLS_PER_ROLLOUT = Number(process.env.LIGHTNING_MAX_CALLS_PER_ROLLOUT) || UPSTREAM_SOCKETS / 4;
const UPSTREAM_QUEUE_TIMEOUT_MS = Number(process.env.LIGHTNING_UPSTREAM_QUEUE_TIMEOUT_MS) || 30_000;

class QueueTimeoutError extends Error {}

/**
 * The agent's headers for the upstream. The placeholder key never leaves the daemon. The daemon's
 * own key is added only for the daemon's own upstream, and only when the agent sent no key of its
 * own (Authorization or Azure-style api-key): a user's gateway or local server never receives it.
 */
function upstreamHeaders(
  request: IncomingMessage,
  config: UpstreamConfig,
  rolloutUpstream: boolean,
  bodyLength: number,
): http.OutgoingHttpHeaders {
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  }
  if (headers.authorization === `Bearer ${PLACEHOLDER_API_KEY}`) delete headers.authorization;
  for (const name of ['api-key', 'x-api-key', 'x-goog-api-key'])
    if (headers[name] === PLACEHOLDER_API_KEY) delete headers[name];
  // Any key of the agent's own (OpenAI/Azure, Anthropic, Gemini headers): the daemon's is then not added.
  const agentHasKey = ['authorization', 'api-key', 'x-api-key', 'x-goog-api-key'].some(
    (name) => headers[name] !== undefined,
  );
  if (!agentHasKey && !rolloutUpstream && config.apiKey) headers.authorization = `Bearer ${config.apiKey}`;
  // Identity encoding, so the record can read the body; it is forwarded byte for byte.
  headers['accept-encoding'] = 'identity';
  headers['content-length'] = bodyLength;
  return headers;
}

function sendError(
  response: ServerResponse,
  status: number,
  type: string,
  message: string,
  shape?: ProxyCall['errorBody'],
): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const body = JSON.stringify(shape ? shape(status, type, message) : { error: { message, type, code: type } });
  const retry = status === 429 || status === 503 ? { 'retry-after': '1' } : {};
  response.writeHead(status, {
    ...retry,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  response.end(body);
}

export class RecordingProxy {
  private readonly inFlight = new Map<string, number>();
  private readonly retries = new RetryLinker();

  constructor(
    private readonly config: UpstreamConfig,
    /** Stores the call's span; resolves once it is committed. */
    private readonly record: (span: ReturnType<typeof callToSpan>, rolloutId: string) => Promise<unknown>,
    private readonly logger: Logger,
    /** In-flight bytes: a non-streamed answer is held until it is recorded and sent. */
    private readonly budget?: ByteBudget,
  ) {}

  /**
   * Forwards one call; resolves when the agent's response has ended. The response ends only once
   * the call's record is committed (DESIGN.md: every acknowledged write durable): a non-streamed
   * answer is sent after the commit, a stream's last byte is followed by the commit and only then
   * by its end. When the record cannot be committed the agent gets a retryable 503 (or, mid-stream,
   * a broken stream), never an answer whose record is lost.
   */
  forward(call: ProxyCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    // Fairness: one rollout holds at most a quarter of the upstream sockets; past that its calls get
    // a 429 (SDKs retry it) instead of starving every other rollout's calls.
    const inFlight = this.inFlight.get(call.rolloutId) ?? 0;
    if (inFlight >= MAX_CALLS_PER_ROLLOUT) {
      sendError(
        response,
        429,
        'rate_limit_exceeded',
        `this rollout has ${inFlight} LLM calls in flight through Lightning (limit ${MAX_CALLS_PER_ROLLOUT}); retry when one finishes`,
      );
      return Promise.resolve();
    }
    this.inFlight.set(call.rolloutId, inFlight + 1);
    return this.forwardCall(call, request, response).finally(() => {
      const left = (this.inFlight.get(call.rolloutId) ?? 1) - 1;
      if (left === 0) this.inFlight.delete(call.rolloutId);
      else this.inFlight.set(call.rolloutId, left);
    });
  }

  private forwardCall(call: ProxyCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    const base = (call.upstream ?? this.config.baseUrl).replace(/\/+$/, '');
    const target = upstreamTarget(base, call.path);
    const startMs = Date.now();
    let firstByteMs: number | null = null;
    const reassembler = call.api ? reassemblerFor(call.api) : undefined;
    const chunks: Buffer[] = [];
    let streamed = false;
    let status: number | null = null;
    const retryOf = call.api && call.json ? this.retries.retryOf(call.rolloutId, call.body) : null;
    /** The Content-Encoding the upstream used although asked for identity (its body decoded), if any. */
    let contentEncoding: string | null = null;

    return new Promise<void>((resolve) => {
      let finished: Promise<boolean> | undefined;
      /** Records the call once; resolves true when the record is committed (or there is none to make). */
      const finish = (
        error: string | null,
        responseJson: JsonObject | null,
        outcome: CallOutcome,
      ): Promise<boolean> => {
        finished ??= this.commit(call, request, {
          base,
          status,
          streamed,
          startMs,
          firstByteMs,
          error,
          responseJson,
          outcome,
          retryOf,
          contentEncoding,
        }).finally(resolve);
        return finished;
      };
      /** Answers with an error once the call is recorded (the error is what the record says too). */
      const fail = (
        httpStatus: number,
        type: string,
        message: string,
        outcome: CallOutcome = { kind: 'upstream_error', status: httpStatus },
      ): void => {
        void finish(message, reassembler && streamed ? reassembler.result() : null, outcome).then(() =>
          sendError(response, httpStatus, type, message, call.errorBody),
        );
      };

      const transport = target.protocol === 'https:' ? https : http;
      let upstream: http.ClientRequest;
      let retried = false;
      // The agent went away before the response ended: stop the upstream work too.
      response.on('close', () => {
        if (!response.writableFinished) {
          upstream.destroy();
          void finish(
            'cancelled: the client disconnected before the response ended',
            reassembler && streamed ? reassembler.result() : null,
            { kind: 'cancelled' },
          );
        }
      });

      /** Sends the call upstream: on a pooled keep-alive socket, or (`fresh`, the one retry) on a new connection. */
      const send = (fresh: boolean): void => {
        upstream = transport.request(target, {
          method: request.method,
          headers: upstreamHeaders(request, this.config, call.upstream !== null, call.body.length),
          agent: fresh ? false : target.protocol === 'https:' ? keepAlive.https : keepAlive.http,
          timeout: this.config.timeoutMs,
        });
        const sent = upstream;

        // A call waiting for a free upstream socket waits at most this long (the socket timeout starts only once it has one).
        const queued = setTimeout(
          () =>
            upstream.destroy(
              new QueueTimeoutError(
                `no upstream connection was free within ${UPSTREAM_QUEUE_TIMEOUT_MS} ms (the daemon is at its ${UPSTREAM_SOCKETS} upstream sockets); retry shortly`,
              ),
            ),
          UPSTREAM_QUEUE_TIMEOUT_MS,
        );
        queued.unref();
        upstream.once('socket', () => clearTimeout(queued));
        upstream.once('close', () => clearTimeout(queued));

        upstream.on('timeout', () =>
          sent.destroy(new UpstreamTimeoutError(`no response from the upstream within ${this.config.timeoutMs} ms`)),
        );
        upstream.on('error', (error) => {
          if (finished) return;
          // A pooled keep-alive socket the upstream had closed fails before any answer byte: the call is sent
          // again once, on a new connection (nothing reached the agent yet). Never after a response began.
          if (
            sent.reusedSocket &&
            status === null &&
            !retried &&
            !response.headersSent &&
            !(error instanceof QueueTimeoutError) &&
            !(error instanceof UpstreamTimeoutError)
          ) {
            retried = true;
            this.logger.debug('a reused upstream connection failed before answering; retrying on a new one', {
              upstream: redactUrl(base),
              error: errorMessage(error),
            });
            send(true);
            return;
          }
          const message = `Lightning could not get a response from the upstream ${redactUrl(base)}: ${errorMessage(error)}`;
          this.logger.warn('upstream request failed', { upstream: redactUrl(base), error: errorMessage(error) });
          fail(
            error instanceof QueueTimeoutError ? 503 : error instanceof UpstreamTimeoutError ? 504 : 502,
            'upstream_unavailable',
            message,
          );
        });
        // An LLM API never switches protocols; without this listener Node would leave the call hanging.
        upstream.on('upgrade', (upgraded: IncomingMessage, socket) => {
          socket.destroy();
          status = upgraded.statusCode ?? null;
          fail(
            502,
            'upstream_malformed_response',
            `the upstream ${redactUrl(base)} answered HTTP ${upgraded.statusCode} (switching protocols), which an LLM API never does`,
          );
        });

        upstream.on('response', (upstreamResponse) => {
          status = upstreamResponse.statusCode ?? 502;
          if (status < 200 || status > 599) {
            // Node refuses to send such a status on (writeHead throws): the agent gets a 502 that says why.
            upstreamResponse.destroy();
            fail(
              502,
              'upstream_malformed_response',
              `the upstream ${redactUrl(base)} answered with HTTP status ${status}, which is not a final HTTP status (200–599)`,
            );
            return;
          }
          if (status >= 300 && status < 400) {
            // A redirect is not followed (the call would leave the proxy, and its record): the agent is told where it points.
            upstreamResponse.resume();
            const location =
              typeof upstreamResponse.headers.location === 'string'
                ? redactUrl(new URL(upstreamResponse.headers.location, target).toString())
                : 'nowhere';
            fail(
              502,
              'upstream_redirect',
              `the upstream ${redactUrl(base)} answered HTTP ${status}, a redirect to ${location}; Lightning does not follow redirects: set the rollout's upstream to where it points`,
              { kind: 'upstream_error', status },
            );
            return;
          }
          streamed = String(upstreamResponse.headers['content-type'] ?? '').includes('text/event-stream');
          const headers: http.OutgoingHttpHeaders = {};
          for (const [name, value] of Object.entries(upstreamResponse.headers)) {
            if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
          }
          // Asked for identity, an upstream may still compress: the body is decoded (the record reads it, the agent
          // gets it plain) and the call says which encoding came.
          const encoding = String(upstreamResponse.headers['content-encoding'] ?? 'identity')
            .trim()
            .toLowerCase();
          const decoder = encoding === 'identity' || encoding === '' ? null : decoderFor(encoding);
          if (decoder === undefined) {
            upstreamResponse.destroy();
            fail(
              502,
              'upstream_malformed_response',
              `the upstream ${redactUrl(base)} answered with Content-Encoding ${JSON.stringify(encoding.slice(0, 50))}, which Lightning cannot decode (it asks for identity)`,
            );
            return;
          }
          if (decoder) {
            contentEncoding = encoding;
            delete headers['content-encoding'];
            decoder.on('error', (error: Error) => {
              if (finished) return;
              upstreamResponse.destroy();
              fail(
                502,
                'upstream_malformed_response',
                `the upstream ${redactUrl(base)}'s ${encoding} body could not be decoded: ${errorMessage(error)}`,
              );
            });
          }
          const source: Readable = decoder ? upstreamResponse.pipe(decoder) : upstreamResponse;
          if (streamed) {
            response.writeHead(status, headers);
            response.flushHeaders();
            let reassembled = 0;
            // One line or event past MAX_SSE_EVENT_CHARS stops the record's parser (the agent still gets every byte).
            const parser = new SseParser((data) => {
              if (data === '[DONE]' || !reassembler) return;
              if (reassembler.truncated) return;
              let parsed: unknown;
              try {
                parsed = JSON.parse(data);
              } catch {
                reassembler.error ??= 'the upstream sent an event that is not JSON';
                return;
              }
              // The record of a huge stream stops growing at the record limit (its content, not the SSE framing); the agent still gets all of it.
              reassembled += streamContentChars(call.api!, parsed);
              if (reassembled > RECORD_LIMITS.maxRecordChars) {
                reassembler.truncated = true;
                return;
              }
              reassembler.add(parsed);
            });
            // A character split across two network chunks must not be split in the record.
            const utf8 = new StringDecoder('utf8');
            let ended = false;
            source.on('data', (chunk: Buffer) => {
              firstByteMs ??= Date.now();
              // Backpressure: a slow agent slows the upstream read instead of growing memory.
              if (!response.write(chunk)) {
                source.pause();
                response.once('drain', () => source.resume());
              }
              parser.feed(utf8.write(chunk));
            });
            source.on('end', () => {
              ended = true;
              parser.feed(utf8.end());
              parser.end();
              if (parser.overflow && reassembler) reassembler.truncated = true;
              const result = reassembler?.result() ?? null;
              if (parser.overflow && result)
                result.lightning_truncated = `the upstream sent an SSE line or event over the ${MAX_SSE_EVENT_CHARS}-character limit; the agent got all of it, the record stops there`;
              const error = status! >= 400 ? `upstream HTTP ${status}` : (reassembler?.error ?? null);
              // An error event inside a 200 stream is an upstream error too: the answer is not whole.
              const truncatedBy = parser.overflow ? 'sse_event' : 'stream_content';
              const outcome: CallOutcome =
                error !== null
                  ? { kind: 'upstream_error', status }
                  : reassembler?.truncated
                    ? { kind: 'truncated', limit: truncatedBy }
                    : { kind: 'ok' };
              // The stream's end is the agent's acknowledgement: it comes after the commit.
              void finish(error, result, outcome).then((committed) =>
                committed ? response.end() : response.destroy(),
              );
            });
            // The upstream dropped the stream: the agent must not wait forever, and the call is recorded.
            upstreamResponse.on('close', () => {
              // A whole compressed body still has its decoder's end to come.
              if (ended || finished || (decoder && upstreamResponse.complete)) return;
              void finish('the upstream stream broke before it ended', reassembler?.result() ?? null, {
                kind: 'upstream_error',
                status,
              }).then(() => response.destroy());
            });
            return;
          }
          let held = 0;
          source.on('data', (chunk: Buffer) => {
            firstByteMs ??= Date.now();
            held += chunk.length;
            try {
              if (held > MAX_UPSTREAM_BODY_BYTES)
                throw new Error(
                  `the answer is over the ${MAX_UPSTREAM_BODY_BYTES}-byte limit for a non-streamed answer`,
                );
              this.budget?.take(chunk.length, response);
            } catch (error) {
              upstreamResponse.destroy();
              decoder?.destroy();
              fail(
                502,
                'upstream_response_too_large',
                `Lightning did not take the upstream ${redactUrl(base)}'s answer: ${errorMessage(error)}`,
                { kind: 'truncated', limit: 'response_body' },
              );
              return;
            }
            chunks.push(chunk);
          });
          source.on('end', () => {
            if (finished) return;
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
              fail(
                502,
                'upstream_malformed_response',
                `the upstream ${redactUrl(base)} answered HTTP ${status} with a body that is not JSON`,
              );
              return;
            }
            let json =
              parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as JsonObject) : null;
            // A streamed answer sent as one JSON array (Gemini's streamGenerateContent without alt=sse).
            if (Array.isArray(parsed) && reassembler && status! < 400) {
              for (const item of parsed) reassembler.add(item);
              json = reassembler.result();
              streamed = true;
            }
            const error =
              status! >= 400
                ? `upstream HTTP ${status}: ${upstreamErrorMessage(json) ?? body.toString('utf8').slice(0, 500)}`
                : null;
            // The answer goes out once its record is committed: the agent's 200 means "recorded".
            void finish(error, json, status! >= 400 ? { kind: 'upstream_error', status } : { kind: 'ok' }).then(
              (committed) => {
                if (!committed) {
                  sendError(
                    response,
                    503,
                    'storage_unavailable',
                    'Lightning could not record this call (the store refused the write); retry shortly',
                  );
                  return;
                }
                response.writeHead(status!, { ...headers, 'content-length': body.length });
                response.end(body);
              },
            );
          });
          const broke = (reason: string): void => {
            if (finished) return;
            fail(502, 'upstream_unavailable', `the upstream connection broke: ${reason}`);
          };
          upstreamResponse.on('error', (error) => broke(errorMessage(error)));
          upstreamResponse.on('close', () => {
            if (!upstreamResponse.complete) broke('the response ended early');
          });
        });

        upstream.end(call.body);
      };
      send(false);
    });
  }

  /** Builds the call's span and waits for its commit; false when it could not be recorded. Never throws. */
  private async commit(
    call: ProxyCall,
    request: IncomingMessage,
    outcome: {
      base: string;
      status: number | null;
      streamed: boolean;
      startMs: number;
      firstByteMs: number | null;
      error: string | null;
      responseJson: JsonObject | null;
      outcome: CallOutcome;
      retryOf: string | null;
      contentEncoding: string | null;
    },
  ): Promise<boolean> {
    if (!call.api || !call.json) return true;
    try {
      const record: CallRecord = {
        api: call.api,
        rolloutId: call.rolloutId,
        callIndex: call.callIndex,
        upstream: redactUrl(outcome.base),
        request: call.json,
        response: outcome.responseJson,
        status: outcome.status,
        streamed: outcome.streamed,
        startMs: outcome.startMs,
        endMs: Date.now(),
        firstByteMs: outcome.firstByteMs,
        error: outcome.error,
        tokenIdsRequested: call.tokenIdsRequested,
        model: call.model,
        traceparent: typeof request.headers.traceparent === 'string' ? request.headers.traceparent : undefined,
        outcome: outcome.outcome,
        retryOf: outcome.retryOf,
        sdkRetryCount: sdkRetryCount(request.headers),
      };
      const span = callToSpan(record);
      if (outcome.contentEncoding) span.attributes['lightning.upstream_content_encoding'] = outcome.contentEncoding;
      await this.record(span, call.rolloutId);
      if (outcome.outcome.kind !== 'ok') this.retries.failedCall(call.rolloutId, call.body, span.spanId);
      return true;
    } catch (error) {
      this.logger.error('could not record an LLM call', { rolloutId: call.rolloutId, error: errorMessage(error) });
      return false;
    }
  }
}

/** A decoder for a Content-Encoding an upstream sent although asked for identity; undefined for one there is none for. */
function decoderFor(encoding: string): zlib.Gunzip | zlib.Inflate | zlib.BrotliDecompress | undefined {
  if (encoding === 'gzip' || encoding === 'x-gzip') return zlib.createGunzip();
  if (encoding === 'deflate') return zlib.createInflate();
  if (encoding === 'br') return zlib.createBrotliDecompress();
  return undefined;
}

/** The upstream URL for a call: the base's path joined with the call's path, the call's query kept intact. */
export function upstreamTarget(base: string, pathAndQuery: string): URL {
  const target = new URL(base);
  const query = pathAndQuery.indexOf('?');
  const callPath = query === -1 ? pathAndQuery : pathAndQuery.slice(0, query);
  target.pathname = `${target.pathname.replace(/\/+$/, '')}${callPath}`;
  const params = new URLSearchParams(target.search);
  if (query !== -1)
    for (const [name, value] of new URLSearchParams(pathAndQuery.slice(query + 1))) params.append(name, value);
  target.search = params.toString();
  return target;
}

function upstreamErrorMessage(json: JsonObject | null): string | undefined {
  const error = json?.error;
  if (error && typeof error === 'object' && !Array.isArray(error) && typeof error.message === 'string')
    return error.message;
  return typeof error === 'string' ? error : undefined;
}
