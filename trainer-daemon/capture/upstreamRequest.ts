/**
 * Sending a call upstream: the target URL, the agent's headers as the upstream gets them, the shared keep-alive
 * sockets with a bounded wait for one, the response timeout, and the one retry on a fresh connection when a pooled
 * socket the upstream had closed fails before any answer byte.
 */
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { PLACEHOLDER_API_KEY } from '../protocol';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import type { Logger } from '../log';
import type { CallExchange } from './callExchange';
import type { UpstreamConfig } from './proxyCall';

/** Headers that belong to one connection (or that the proxy sets itself), never forwarded either way. */
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
export const UPSTREAM_SOCKETS = 512;
const keepAlive = {
  http: new http.Agent({ keepAlive: true, maxSockets: UPSTREAM_SOCKETS }),
  https: new https.Agent({ keepAlive: true, maxSockets: UPSTREAM_SOCKETS }),
};
/** How long a call waits for a free upstream socket by default. */
export const DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS = 30_000;

/** No upstream socket was free in time (HTTP 503). */
class QueueTimeoutError extends Error {}
/** The upstream sent nothing within the timeout (HTTP 504, where other failures are 502). */
class UpstreamTimeoutError extends Error {}

/** `headers` without the hop-by-hop ones. */
export function endToEndHeaders(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const kept: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) kept[name] = value;
  }
  return kept;
}

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
  const headers = endToEndHeaders(request.headers);
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

export interface UpstreamSend {
  readonly exchange: CallExchange;
  readonly target: URL;
  /** The agent's request (its method and headers). */
  readonly request: IncomingMessage;
  readonly config: UpstreamConfig;
  /** How long the call may wait for a free upstream socket (then 503). */
  readonly queueTimeoutMs: number;
  readonly logger: Logger;
  /** Each request as it is made (the first, and the retry's): what a client that goes away destroys. */
  readonly onRequest: (upstream: http.ClientRequest) => void;
  /** The upstream's response, once it begins. */
  readonly onResponse: (upstreamResponse: IncomingMessage) => void;
}

/**
 * Sends the call upstream: on a pooled keep-alive socket, or (`fresh`, the one retry) on a new connection. A failure
 * before any answer ends the call with 503 (no socket free in time), 504 (no answer in time) or 502.
 */
export function sendUpstream(send: UpstreamSend, fresh = false): void {
  const { exchange, target, request, config, logger, queueTimeoutMs } = send;
  const { call, response, base } = exchange;
  const transport = target.protocol === 'https:' ? https : http;
  const upstream = transport.request(target, {
    method: request.method,
    headers: upstreamHeaders(request, config, call.upstream !== null, call.body.length),
    agent: fresh ? false : target.protocol === 'https:' ? keepAlive.https : keepAlive.http,
    timeout: config.timeoutMs,
  });
  send.onRequest(upstream);

  // A call waiting for a free upstream socket waits at most this long (the socket timeout starts only once it has one).
  const queued = setTimeout(
    () =>
      upstream.destroy(
        new QueueTimeoutError(
          `no upstream connection was free within ${queueTimeoutMs} ms (the daemon is at its ${UPSTREAM_SOCKETS} upstream sockets); retry shortly`,
        ),
      ),
    queueTimeoutMs,
  );
  queued.unref();
  upstream.once('socket', () => clearTimeout(queued));
  upstream.once('close', () => clearTimeout(queued));

  upstream.on('timeout', () =>
    upstream.destroy(new UpstreamTimeoutError(`no response from the upstream within ${config.timeoutMs} ms`)),
  );
  upstream.on('error', (error) => {
    if (exchange.ended) return;
    // A pooled keep-alive socket the upstream had closed fails before any answer byte: the call is sent
    // again once, on a new connection (nothing reached the agent yet). Never after a response began.
    if (
      upstream.reusedSocket &&
      exchange.status === null &&
      !fresh &&
      !response.headersSent &&
      !(error instanceof QueueTimeoutError) &&
      !(error instanceof UpstreamTimeoutError)
    ) {
      logger.debug('a reused upstream connection failed before answering; retrying on a new one', {
        upstream: redactUrl(base),
        error: errorMessage(error),
      });
      sendUpstream(send, true);
      return;
    }
    const message = `Lightning could not get a response from the upstream ${redactUrl(base)}: ${errorMessage(error)}`;
    logger.warn('upstream request failed', { upstream: redactUrl(base), error: errorMessage(error) });
    exchange.fail(
      error instanceof QueueTimeoutError ? 503 : error instanceof UpstreamTimeoutError ? 504 : 502,
      'upstream_unavailable',
      message,
    );
  });
  // An LLM API never switches protocols; without this listener Node would leave the call hanging.
  upstream.on('upgrade', (upgraded: IncomingMessage, socket) => {
    socket.destroy();
    exchange.status = upgraded.statusCode ?? null;
    exchange.fail(
      502,
      'upstream_malformed_response',
      `the upstream ${redactUrl(base)} answered HTTP ${upgraded.statusCode} (switching protocols), which an LLM API never does`,
    );
  });
  upstream.on('response', send.onResponse);
  upstream.end(call.body);
}
