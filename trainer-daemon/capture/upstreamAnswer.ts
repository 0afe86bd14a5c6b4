/**
 * The upstream's answer begins: a status no agent can be given or a redirect ends the call here; otherwise the
 * headers the agent gets are chosen and a body the upstream compressed although asked for identity is decoded, ready
 * to be relayed as a stream (relayStream.ts) or held and sent whole (relayBody.ts).
 */
import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import type { CallExchange } from './callExchange';
import { endToEndHeaders } from './upstreamRequest';

type Decoder = zlib.Gunzip | zlib.Inflate | zlib.BrotliDecompress;

/**
 * A decoder for a Content-Encoding an upstream sent although asked for identity; undefined for one there is none for.
 */
function decoderFor(encoding: string): Decoder | undefined {
  if (encoding === 'gzip' || encoding === 'x-gzip') return zlib.createGunzip();
  if (encoding === 'deflate') return zlib.createInflate();
  if (encoding === 'br') return zlib.createBrotliDecompress();
  return undefined;
}

/** The upstream's body as the agent and the record read it; what `relayStream` and `relayBody` are given. */
export interface UpstreamBody {
  readonly upstreamResponse: IncomingMessage;
  /** The body, decoded where it came compressed. */
  readonly source: Readable;
  /** The decoder `source` comes out of, when there is one. */
  readonly decoder: Decoder | null;
  /** The headers the agent gets (end-to-end only; no Content-Encoding once decoded). */
  readonly headers: OutgoingHttpHeaders;
  /** The upstream's HTTP status (200–599). */
  readonly status: number;
}

/** Ends the call for a status that is not a final one, or a redirect; true when it did. */
function refusedStatus(
  exchange: CallExchange,
  upstreamResponse: IncomingMessage,
  target: URL,
  status: number,
): boolean {
  const base = redactUrl(exchange.base);
  if (status < 200 || status > 599) {
    // Node refuses to send such a status on (writeHead throws): the agent gets a 502 that says why.
    upstreamResponse.destroy();
    exchange.fail(
      502,
      'upstream_malformed_response',
      `the upstream ${base} answered with HTTP status ${status}, which is not a final HTTP status (200–599)`,
    );
    return true;
  }
  if (status >= 300 && status < 400) {
    // A redirect is not followed (the call would leave the proxy, and its record): the agent is told where it points.
    upstreamResponse.resume();
    const location =
      typeof upstreamResponse.headers.location === 'string'
        ? redactUrl(new URL(upstreamResponse.headers.location, target).toString())
        : 'nowhere';
    exchange.fail(
      502,
      'upstream_redirect',
      `the upstream ${base} answered HTTP ${status}, a redirect to ${location}; Lightning does not follow redirects: set the rollout's upstream to where it points`,
      { kind: 'upstream_error', status },
    );
    return true;
  }
  return false;
}

/**
 * The body to relay, decoded when the upstream compressed it although asked for identity (the record reads it, the
 * agent gets it plain, and the call says which encoding came); undefined, the call ended, for an encoding Lightning
 * cannot decode.
 */
function decodedBody(
  exchange: CallExchange,
  upstreamResponse: IncomingMessage,
  status: number,
): UpstreamBody | undefined {
  const base = redactUrl(exchange.base);
  const headers = endToEndHeaders(upstreamResponse.headers);
  const encoding = String(upstreamResponse.headers['content-encoding'] ?? 'identity')
    .trim()
    .toLowerCase();
  const decoder = encoding === 'identity' || encoding === '' ? null : decoderFor(encoding);
  if (decoder === undefined) {
    upstreamResponse.destroy();
    exchange.fail(
      502,
      'upstream_malformed_response',
      `the upstream ${base} answered with Content-Encoding ${JSON.stringify(encoding.slice(0, 50))}, which Lightning cannot decode (it asks for identity)`,
    );
    return undefined;
  }
  if (decoder) {
    exchange.contentEncoding = encoding;
    delete headers['content-encoding'];
    decoder.on('error', (error: Error) => {
      if (exchange.ended) return;
      upstreamResponse.destroy();
      exchange.fail(
        502,
        'upstream_malformed_response',
        `the upstream ${base}'s ${encoding} body could not be decoded: ${errorMessage(error)}`,
      );
    });
  }
  const source: Readable = decoder ? upstreamResponse.pipe(decoder) : upstreamResponse;
  return { upstreamResponse, source, decoder, headers, status };
}

/**
 * Takes the upstream's answer: its status, whether it streams, and its body as the agent gets it; undefined when the
 * call already ended here (a status no agent can be given, a redirect, an encoding Lightning cannot decode).
 */
export function acceptAnswer(
  exchange: CallExchange,
  upstreamResponse: IncomingMessage,
  target: URL,
): UpstreamBody | undefined {
  const status = upstreamResponse.statusCode ?? 502;
  exchange.status = status;
  if (refusedStatus(exchange, upstreamResponse, target, status)) return undefined;
  exchange.streamed = String(upstreamResponse.headers['content-type'] ?? '').includes('text/event-stream');
  return decodedBody(exchange, upstreamResponse, status);
}
