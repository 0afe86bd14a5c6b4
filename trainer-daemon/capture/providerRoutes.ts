/**
 * Which provider API a request under a rollout URL speaks, besides OpenAI's: the Anthropic Messages
 * API (`/v1/messages…`, and `/v1/models` when the client sends `anthropic-version`) and the Gemini
 * API (`/v1beta/…`). Their SDKs take the rollout URL itself as base URL (`ANTHROPIC_BASE_URL`,
 * `GOOGLE_GEMINI_BASE_URL`) and append these paths. The Vercel AI SDK's `@ai-sdk/anthropic` expects
 * a base that ends in `/v1` and appends only `/messages`: `/messages…` is the Messages API too.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { PLACEHOLDER_API_KEY, type Json, type ProviderName } from '../protocol';
import { anthropicErrorBody } from './anthropic';
import { geminiCall, geminiErrorBody } from './gemini';
import type { Api } from './reassemble';

export const DEFAULT_PROVIDER_UPSTREAMS: Readonly<Record<ProviderName, string>> = {
  anthropic: 'https://api.anthropic.com',
  gemini: 'https://generativelanguage.googleapis.com',
};

export interface ProviderRoute {
  readonly provider: ProviderName;
  /** The recorded API, or null for calls forwarded unrecorded (count_tokens, models). */
  readonly api: Api | null;
  /** Path and query for the upstream, e.g. `/v1/messages` (a placeholder `key=` removed). */
  readonly path: string;
  /** Gemini: the model named in the URL. */
  readonly model?: string;
  /** Whether the URL asks for a stream (Gemini's streamGenerateContent; the Messages API says so in its body). */
  readonly stream: boolean;
  readonly errorBody: (status: number, type: string, message: string) => Json;
}

const ERROR_BODY: Record<ProviderName, ProviderRoute['errorBody']> = {
  anthropic: (status, _type, message) => anthropicErrorBody(status, message),
  gemini: (status, _type, message) => geminiErrorBody(status, message),
};

/** `/v1/messages…` (the Anthropic SDKs) or `/messages…` (`@ai-sdk/anthropic`, whose base ends in `/v1`). */
const MESSAGES_PATH = /^(?:\/v1)?\/messages(?:\/|$)/;

function providerOf(path: string, headers: IncomingHttpHeaders): ProviderName | null {
  if (/^\/v1(beta|alpha)\//.test(path)) return 'gemini';
  if (MESSAGES_PATH.test(path)) return 'anthropic';
  if ((path === '/v1/models' || path.startsWith('/v1/models/')) && headers['anthropic-version'] !== undefined)
    return 'anthropic';
  return null;
}

/** The shape errors take on this path: the provider's, or null for OpenAI's. */
export function errorBodyFor(path: string, headers: IncomingHttpHeaders): ProviderRoute['errorBody'] | null {
  const provider = providerOf(path, headers);
  return provider ? ERROR_BODY[provider] : null;
}

export function providerRoute(
  method: string | undefined,
  path: string,
  search: string,
  headers: IncomingHttpHeaders,
): ProviderRoute | null {
  const provider = providerOf(path, headers);
  if (!provider) return null;
  const query = new URLSearchParams(search);
  if (query.get('key') === PLACEHOLDER_API_KEY) query.delete('key');
  const rest = query.toString();
  const upstreamPath = `${path}${rest ? `?${rest}` : ''}`;
  if (provider === 'anthropic') {
    return {
      provider,
      api: method === 'POST' && (path === '/v1/messages' || path === '/messages') ? 'anthropic.messages' : null,
      path: upstreamPath,
      stream: false,
      errorBody: ERROR_BODY.anthropic,
    };
  }
  const call = method === 'POST' ? geminiCall(path) : null;
  return {
    provider,
    api: call ? 'gemini.generate_content' : null,
    path: upstreamPath,
    model: call?.model,
    stream: call?.stream ?? false,
    errorBody: ERROR_BODY.gemini,
  };
}

/**
 * The path a provider call takes at `base`: the agent's own, joined to the base as its SDK would
 * have joined it (`upstreamTarget`). A `/messages` call (a base ending in `/v1`, as `@ai-sdk/anthropic`
 * expects) to an upstream given as a bare origin — the provider's default, `LIGHTNING_ANTHROPIC_UPSTREAM_URL`,
 * an `ANTHROPIC_BASE_URL` of `https://api.anthropic.com` (which that SDK itself reads as `…/v1`) —
 * goes to `/v1/messages` there.
 */
export function providerPathAt(base: string, route: ProviderRoute): string {
  if (route.provider !== 'anthropic' || route.path.startsWith('/v1/')) return route.path;
  let basePath: string;
  try {
    basePath = new URL(base).pathname;
  } catch {
    return route.path;
  }
  return basePath.replace(/\/+$/, '') === '' ? `/v1${route.path}` : route.path;
}
