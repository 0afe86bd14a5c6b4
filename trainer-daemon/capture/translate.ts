/**
 * Anthropic and Gemini agents on an open model: when a rollout's calls are answered by a server that
 * speaks chat completions only (a checkpoint, the trainer's policy, any `--token-ids` engine), the
 * proxy translates the agent's Messages or generateContent request to chat completions — asking for
 * exact token ids and logprobs — and the answer back into the agent's API, as JSON or as the server-
 * sent events it asked for. The record keeps the agent's request, the answer it got, and the
 * engine's token ids, so LightningRL trains on exactly what the policy produced.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  anthropicRequestToChat,
  anthropicResponseEvents,
  chatToAnthropicResponse,
  chatToGeminiResponse,
  geminiRequestToChat,
  type CallOutcome,
  type JsonObject,
} from '../protocol';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import type { Logger } from '../log';
import { callToSpan } from './record';
import { RetryLinker, sdkRetryCount } from './retries';
import { sendError } from './callExchange';
import { upstreamErrorMessage } from './reassemble';
import type { RolloutCallLimit } from './callLimit';
import type { ProxyLimits } from './proxy';
import type { CallRecorder, ProxyCall, UpstreamConfig } from './proxyCall';
import { BodyOverLimitError } from '../util/boundedBody';
import { postJson } from '../util/httpPost';

export interface TranslatedCall extends ProxyCall {
  /** The chat completions base URL (`…/v1`) that answers. */
  readonly chatBase: string;
  /** Whether the agent asked for a stream (Messages `stream: true`, Gemini `streamGenerateContent`). */
  readonly stream: boolean;
}

function chatRequestOf(call: TranslatedCall): JsonObject {
  const json = call.json ?? {};
  const chat =
    call.api === 'anthropic.messages'
      ? anthropicRequestToChat(json)
      : geminiRequestToChat(json, call.model ?? 'policy');
  return { logprobs: true, ...chat, stream: false, return_token_ids: true };
}

function answerOf(call: TranslatedCall, completion: JsonObject): JsonObject {
  const model = call.model ?? (typeof call.json?.model === 'string' ? call.json.model : 'policy');
  return call.api === 'anthropic.messages'
    ? chatToAnthropicResponse(completion, model)
    : chatToGeminiResponse(completion, model);
}

function writeAnswer(call: TranslatedCall, response: ServerResponse, answer: JsonObject): void {
  if (!call.stream) {
    const body = JSON.stringify(answer);
    response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    response.end(body);
    return;
  }
  const sse =
    call.api === 'anthropic.messages' || new URLSearchParams(call.path.split('?')[1] ?? '').get('alt') === 'sse';
  response.writeHead(200, {
    'content-type': sse ? 'text/event-stream' : 'application/json',
    'cache-control': 'no-cache',
  });
  if (call.api === 'anthropic.messages') {
    response.end(
      anthropicResponseEvents(answer)
        .map(({ event, data }) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
        .join(''),
    );
  } else if (sse) {
    response.end(`data: ${JSON.stringify(answer)}\r\n\r\n`);
  } else {
    // `streamGenerateContent` without `alt=sse` answers one JSON array of the chunks (capture/gemini.ts).
    response.end(JSON.stringify([answer]));
  }
}

export interface TranslatingProxyOptions {
  readonly upstream: UpstreamConfig;
  /** Stores the call's span; resolves once it is committed (the agent's answer waits on it). */
  readonly record: CallRecorder;
  readonly logger: Logger;
  /** The policy server's answer is read up to `maxUpstreamBodyBytes`, the recording proxy's cap. */
  readonly limits: Pick<ProxyLimits, 'maxUpstreamBodyBytes'>;
  /** The rollouts' calls in flight, shared with the recording proxy (their calls count together). */
  readonly callLimit: RolloutCallLimit;
}

export class TranslatingProxy {
  private readonly retries = new RetryLinker();

  constructor(private readonly options: TranslatingProxyOptions) {}

  /** Translates and forwards one call, answered once its record is committed; past the rollout's share, a 429. */
  forward(call: TranslatedCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    return this.options.callLimit.run(call, response, () => this.forwardCall(call, request, response));
  }

  private async forwardCall(call: TranslatedCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    const startMs = Date.now();
    const base = call.chatBase.replace(/\/+$/, '');
    const aborted = new AbortController();
    response.on('close', () => {
      if (!response.writableFinished) aborted.abort(new Error('the client disconnected before the response ended'));
    });
    let status: number | null = null;
    let completion: JsonObject | null = null;
    let answer: JsonObject | null = null;
    let error: string | null = null;
    let outcome: CallOutcome = { kind: 'ok' };
    let firstByteMs: number | null = null;
    const retryOf = call.json ? this.retries.retryOf(call.rolloutId, call.body) : null;
    // The answer (or error) is sent only once the call's record is committed, as the recording proxy does.
    let reply: () => void;
    try {
      // Not fetch: its 300 s wait for headers would end a long answer before LIGHTNING_UPSTREAM_TIMEOUT_MS does.
      const upstream = await postJson(`${base}/chat/completions`, JSON.stringify(chatRequestOf(call)), {
        headers:
          this.options.upstream.apiKey && call.upstream === null
            ? { authorization: `Bearer ${this.options.upstream.apiKey}` }
            : {},
        signal: AbortSignal.any([aborted.signal, AbortSignal.timeout(this.options.upstream.timeoutMs)]),
        maxBytes: this.options.limits.maxUpstreamBodyBytes,
      });
      status = upstream.status;
      const text = upstream.text;
      firstByteMs = Date.now();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = null;
      }
      const json =
        parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as JsonObject) : null;
      // An error inside a 200 (`{"error": {…}}`) is no answer either.
      const detail = upstreamErrorMessage(json);
      if (upstream.status >= 400 || json === null || detail !== undefined) {
        error = `the policy server ${redactUrl(base)} answered HTTP ${upstream.status}${detail !== undefined ? `: ${detail}` : upstream.status < 400 ? ' with a body that is not JSON' : ''}`;
        const errorStatus = upstream.status >= 400 ? upstream.status : 502;
        outcome = { kind: 'upstream_error', status: errorStatus };
        const message = error;
        reply = () => sendError(response, errorStatus, 'upstream_error', message, call.errorBody);
      } else {
        completion = json;
        const translated = answerOf(call, completion);
        answer = translated;
        reply = () => writeAnswer(call, response, translated);
      }
    } catch (caught) {
      if (caught instanceof BodyOverLimitError) {
        // Not taken, and recorded as cut by that limit: the call is left out of training like any truncated one.
        error = `Lightning did not take the policy server ${redactUrl(base)}'s answer: ${caught.message}`;
        outcome = { kind: 'truncated', limit: 'response_body' };
        const message = error;
        reply = () => sendError(response, 502, 'upstream_response_too_large', message, call.errorBody);
      } else {
        error = aborted.signal.aborted
          ? 'cancelled: the client disconnected before the response ended'
          : `Lightning could not get a response from the policy server ${redactUrl(base)}: ${errorMessage(caught)}`;
        if (!aborted.signal.aborted)
          this.options.logger.warn('policy request failed', { upstream: redactUrl(base), error: errorMessage(caught) });
        const message = error;
        const errorStatus = /timeout|aborted due to timeout/i.test(errorMessage(caught)) ? 504 : 502;
        outcome = aborted.signal.aborted ? { kind: 'cancelled' } : { kind: 'upstream_error', status: errorStatus };
        reply = () => sendError(response, errorStatus, 'upstream_error', message, call.errorBody);
      }
    }
    if (!call.json) {
      reply();
      return;
    }
    try {
      const span = callToSpan({
        api: call.api!,
        rolloutId: call.rolloutId,
        callIndex: call.callIndex,
        upstream: redactUrl(base),
        request: call.json,
        response: answer,
        status,
        streamed: call.stream,
        startMs,
        endMs: Date.now(),
        firstByteMs,
        error,
        tokenIdsRequested: true,
        model: call.model,
        translated: completion,
        traceparent: typeof request.headers.traceparent === 'string' ? request.headers.traceparent : undefined,
        outcome,
        retryOf,
        sdkRetryCount: sdkRetryCount(request.headers),
      });
      await this.options.record(span, call);
      if (outcome.kind !== 'ok') this.retries.failedCall(call.rolloutId, call.body, span.spanId);
    } catch (caught) {
      this.options.logger.error('could not record an LLM call', {
        rolloutId: call.rolloutId,
        error: errorMessage(caught),
      });
      sendError(
        response,
        503,
        'storage_unavailable',
        'Lightning could not record this call (the store refused it); retry',
        call.errorBody,
      );
      return;
    }
    reply();
  }
}
