/**
 * The recording OpenAI-compatible proxy. A call is forwarded to the rollout's upstream with the
 * agent's own headers; the agent gets the upstream's status, headers and body unchanged. Server-
 * sent events are written to the agent as each chunk arrives (no buffering) while a parser
 * reassembles the response for the record. A client that goes away aborts the upstream request.
 * Every call, failed ones included, becomes one `llm` span of the rollout.
 *
 * A call walks five phases, each in a module of its own: admit (`forward`, below: a fair share of the calls in
 * flight per rollout, callLimit.ts), send (upstreamRequest.ts: headers, keep-alive sockets, the one retry on a fresh
 * socket), accept the answer (upstreamAnswer.ts: status, redirect, encoding), relay it (relayStream.ts as it comes,
 * or relayBody.ts whole), and record it (`commit`, below: the span, committed before the agent's answer ends).
 * callExchange.ts holds what the call has learned on the way and ends it once.
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import { errorMessage } from '../protocol/errors';
import { redactUrl } from '../protocol/secrets';
import type { Logger } from '../log';
import type { ByteBudget } from './byteBudget';
import { CallExchange, type CallEnd } from './callExchange';
import type { RolloutCallLimit } from './callLimit';
import type { CallRecorder, ProxyCall, UpstreamConfig } from './proxyCall';
import { callToSpan, type CallRecord } from './record';
import { relayBody } from './relayBody';
import { relayStream } from './relayStream';
import { RetryLinker, sdkRetryCount } from './retries';
import { acceptAnswer } from './upstreamAnswer';
import { DEFAULT_MAX_SSE_EVENT_CHARS } from './sseParser';
import { DEFAULT_MAX_UPSTREAM_BODY_BYTES } from '../util/boundedBody';
import { DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS, sendUpstream, upstreamTarget, UPSTREAM_SOCKETS } from './upstreamRequest';

/** The proxy's limits (the daemon's are read from the environment: limits.ts). */
export interface ProxyLimits {
  /** LLM calls one rollout may have in flight through the proxy; past it, 429 (LIGHTNING_MAX_CALLS_PER_ROLLOUT). */
  readonly maxCallsPerRollout: number;
  /** How long a call may wait for a free upstream socket; then 503 (LIGHTNING_UPSTREAM_QUEUE_TIMEOUT_MS). */
  readonly upstreamQueueTimeoutMs: number;
  /** The longest SSE line or event the record's parser reads (LIGHTNING_MAX_SSE_EVENT_CHARS). */
  readonly maxSseEventChars: number;
  /** A non-streamed answer's most bytes; past it 502, recorded truncated (LIGHTNING_MAX_UPSTREAM_BODY_BYTES). */
  readonly maxUpstreamBodyBytes: number;
}

/** One rollout holds at most a quarter of the upstream sockets. */
export const DEFAULT_PROXY_LIMITS: ProxyLimits = {
  maxCallsPerRollout: UPSTREAM_SOCKETS / 4,
  upstreamQueueTimeoutMs: DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS,
  maxSseEventChars: DEFAULT_MAX_SSE_EVENT_CHARS,
  maxUpstreamBodyBytes: DEFAULT_MAX_UPSTREAM_BODY_BYTES,
};

export interface RecordingProxyOptions {
  readonly upstream: UpstreamConfig;
  /** Stores the call's span; resolves once it is committed. */
  readonly record: CallRecorder;
  readonly logger: Logger;
  /** In-flight bytes: a non-streamed answer is held until it is recorded and sent. */
  readonly budget?: ByteBudget;
  readonly limits: ProxyLimits;
  /** The rollouts' calls in flight, shared with the translating proxy (their calls count together). */
  readonly callLimit: RolloutCallLimit;
}

export class RecordingProxy {
  private readonly retries = new RetryLinker();

  constructor(private readonly options: RecordingProxyOptions) {}

  /**
   * Forwards one call; resolves when the agent's response has ended. The response ends only once
   * the call's record is committed (docs/guarantees.md: every acknowledged write durable): a non-streamed
   * answer is sent after the commit, a stream's last byte is followed by the commit and only then
   * by its end. When the record cannot be committed the agent gets a retryable 503 (or, mid-stream,
   * a broken stream), never an answer whose record is lost. Past the rollout's share of calls in flight: a 429.
   */
  forward(call: ProxyCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    return this.options.callLimit.run(call, response, () => this.forwardCall(call, request, response));
  }

  /** Sends the call, relays its answer and records it; resolves once the record is settled. */
  private forwardCall(call: ProxyCall, request: IncomingMessage, response: ServerResponse): Promise<void> {
    const base = (call.upstream ?? this.options.upstream.baseUrl).replace(/\/+$/, '');
    const target = upstreamTarget(base, call.path);
    const retryOf = call.api && call.json ? this.retries.retryOf(call.rolloutId, call.body) : null;
    return new Promise<void>((resolve) => {
      const exchange = new CallExchange(
        call,
        base,
        response,
        (end) => this.commit(call, request, base, retryOf, end),
        resolve,
      );
      let upstream: ClientRequest | undefined;
      // The agent went away before the response ended: stop the upstream work too.
      response.on('close', () => {
        if (response.writableFinished) return;
        upstream?.destroy();
        void exchange.finish('cancelled: the client disconnected before the response ended', exchange.partial(), {
          kind: 'cancelled',
        });
      });
      sendUpstream({
        exchange,
        target,
        request,
        config: this.options.upstream,
        queueTimeoutMs: this.options.limits.upstreamQueueTimeoutMs,
        logger: this.options.logger,
        onRequest: (sent) => (upstream = sent),
        onResponse: (upstreamResponse) => {
          const body = acceptAnswer(exchange, upstreamResponse, target);
          if (!body) return;
          if (exchange.streamed) relayStream(exchange, body, this.options.limits.maxSseEventChars);
          else relayBody(exchange, body, this.options.budget, this.options.limits.maxUpstreamBodyBytes);
        },
      });
    });
  }

  /** Builds the call's span and waits for its commit; false when it could not be recorded. Never throws. */
  private async commit(
    call: ProxyCall,
    request: IncomingMessage,
    base: string,
    retryOf: string | null,
    end: CallEnd,
  ): Promise<boolean> {
    if (!call.api || !call.json) return true;
    try {
      const record: CallRecord = {
        api: call.api,
        rolloutId: call.rolloutId,
        callIndex: call.callIndex,
        upstream: redactUrl(base),
        request: call.json,
        response: end.responseJson,
        status: end.status,
        streamed: end.streamed,
        startMs: end.startMs,
        endMs: Date.now(),
        firstByteMs: end.firstByteMs,
        error: end.error,
        tokenIdsRequested: call.tokenIdsRequested,
        model: call.model,
        traceparent: typeof request.headers.traceparent === 'string' ? request.headers.traceparent : undefined,
        outcome: end.outcome,
        retryOf,
        sdkRetryCount: sdkRetryCount(request.headers),
      };
      const span = callToSpan(record);
      if (end.contentEncoding) span.attributes['lightning.upstream_content_encoding'] = end.contentEncoding;
      await this.options.record(span, call);
      if (end.outcome.kind !== 'ok') this.retries.failedCall(call.rolloutId, call.body, span.spanId);
      return true;
    } catch (error) {
      this.options.logger.error('could not record an LLM call', {
        rolloutId: call.rolloutId,
        error: errorMessage(error),
      });
      return false;
    }
  }
}
