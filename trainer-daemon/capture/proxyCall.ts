/**
 * What the recording proxy is given: the daemon's default upstream, and one agent call as the agent routes resolved it
 * (capture/agentRoutes.ts). Its own module so each phase of a call (capture/callExchange.ts, upstreamRequest.ts,
 * upstreamAnswer.ts, relayStream.ts, relayBody.ts) can name it without importing the proxy that wires them.
 */
import type { Json, ProviderName, SpanInput } from '../protocol';
import type { JsonObject } from '../protocol/json';
import type { Api } from './reassemble';

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

/** Whose call it is: the rollout, and the attempt whose key it came with (its record must not join a later one). */
export interface CallOwner {
  readonly rolloutId: string;
  readonly attempt: number;
}

/** Stores a call's span for its owner; resolves once it is committed (the agent's answer waits on it). */
export type CallRecorder = (span: SpanInput, owner: CallOwner) => Promise<unknown>;

export interface ProxyCall extends CallOwner {
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
