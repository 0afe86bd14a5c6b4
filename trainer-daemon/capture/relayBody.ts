/**
 * A non-streamed answer: held (within the per-answer cap and the daemon's in-flight byte budget), read as JSON for
 * the record, and sent to the agent whole only once its record is committed — the agent's 200 means "recorded".
 */
import { isJsonObject, type Json, type JsonObject } from '../protocol/json';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import { BodyOverLimitError } from '../util/boundedBody';
import type { ByteBudget } from './byteBudget';
import { sendError, type CallExchange } from './callExchange';
import type { UpstreamBody } from './upstreamAnswer';
import { upstreamErrorMessage } from './reassemble';

/** Reads the held answer for the record and sends it once the record is committed (503 when it could not be). */
function answerWhole(exchange: CallExchange, body: UpstreamBody, bytes: Buffer): void {
  const { response, reassembler } = exchange;
  const { upstreamResponse, headers, status } = body;
  let parsed: unknown;
  let malformed = false;
  if (String(upstreamResponse.headers['content-type'] ?? '').includes('json') || bytes.length > 0) {
    try {
      parsed = JSON.parse(bytes.toString('utf8'));
    } catch {
      malformed = status < 400;
    }
  }
  if (malformed) {
    exchange.fail(
      502,
      'upstream_malformed_response',
      `the upstream ${redactUrl(exchange.base)} answered HTTP ${status} with a body that is not JSON`,
    );
    return;
  }
  let json = parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as JsonObject) : null;
  // A streamed answer sent as one JSON array (Gemini's streamGenerateContent without alt=sse). Its error answer is
  // the error object inside such an array: the record keeps that object.
  if (Array.isArray(parsed) && reassembler && status < 400) {
    for (const item of parsed) reassembler.add(item);
    json = reassembler.result();
    exchange.streamed = true;
  } else if (Array.isArray(parsed) && status >= 400)
    json =
      (parsed as Json[]).find((item): item is JsonObject => isJsonObject(item) && item.error !== undefined) ?? null;
  // An error inside a 2xx answer is an upstream error too, as in a stream (relayStream.ts): an `error` item of Gemini's
  // JSON array, or a gateway's `{"error": {…}}` (a Responses answer's `"error": null` is none). The answer is not
  // whole.
  // Only an LLM call's answer is read so (a fine-tuning job's status may well carry an `error` field).
  const generation = exchange.call.api !== null && exchange.call.api !== 'embeddings';
  const errorInside = status < 400 && generation ? (reassembler?.error ?? upstreamErrorMessage(json)) : undefined;
  const error =
    status >= 400
      ? `upstream HTTP ${status}: ${upstreamErrorMessage(json) ?? bytes.toString('utf8').slice(0, 500)}`
      : errorInside !== undefined
        ? `upstream error in an HTTP ${status} answer: ${errorInside}`
        : null;
  // The answer goes out once its record is committed: the agent's 200 means "recorded".
  void exchange
    .finish(error, json, error !== null ? { kind: 'upstream_error', status } : { kind: 'ok' })
    .then((committed) => {
      if (!committed) {
        sendError(
          response,
          503,
          'storage_unavailable',
          'Lightning could not record this call (the store refused the write); retry shortly',
        );
        return;
      }
      response.writeHead(status, { ...headers, 'content-length': bytes.length });
      response.end(bytes);
    });
}

/**
 * Holds a non-streamed answer (a 502 past `maxBytes` or the byte budget, or when the upstream breaks off), then
 * answers it whole once it is recorded.
 */
export function relayBody(
  exchange: CallExchange,
  body: UpstreamBody,
  budget: ByteBudget | undefined,
  maxBytes: number,
): void {
  const { upstreamResponse, source, decoder } = body;
  const chunks: Buffer[] = [];
  let held = 0;
  source.on('data', (chunk: Buffer) => {
    exchange.firstByteMs ??= Date.now();
    held += chunk.length;
    try {
      if (held > maxBytes) throw new BodyOverLimitError(maxBytes);
      budget?.take(chunk.length, exchange.response);
    } catch (error) {
      upstreamResponse.destroy();
      decoder?.destroy();
      exchange.fail(
        502,
        'upstream_response_too_large',
        `Lightning did not take the upstream ${redactUrl(exchange.base)}'s answer: ${errorMessage(error)}`,
        { kind: 'truncated', limit: 'response_body' },
      );
      return;
    }
    chunks.push(chunk);
  });
  source.on('end', () => {
    if (exchange.ended) return;
    answerWhole(exchange, body, Buffer.concat(chunks));
  });
  const broke = (reason: string): void => {
    if (exchange.ended) return;
    exchange.fail(502, 'upstream_unavailable', `the upstream connection broke: ${reason}`);
  };
  upstreamResponse.on('error', (error) => broke(errorMessage(error)));
  upstreamResponse.on('close', () => {
    if (!upstreamResponse.complete) broke('the response ended early');
  });
}
