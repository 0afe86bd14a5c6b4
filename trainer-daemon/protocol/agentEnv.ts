/**
 * The environment an instrumented agent receives (docs/agents.md, "What the agent
 * receives"). One pure function, used by `lightning run` and by the extension's Debug with
 * Lightning, so both inject exactly the same variables.
 */
import { z } from 'zod';
import type { Json } from './records';

/** The providers whose own APIs the proxy captures besides OpenAI's (see llmApis.ts). */
export const ProviderName = z.enum(['anthropic', 'gemini']);
export type ProviderName = z.infer<typeof ProviderName>;

const UpstreamUrl = z
  .string()
  .regex(/^https?:\/\/[^\s/?#]+/i, 'upstream must be an http(s) URL, e.g. http://127.0.0.1:8000');
/**
 * A rollout's own upstream per provider API (the user's ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL); absent: the
 * provider's.
 */
export const ProviderUpstreams = z.strictObject({ anthropic: UpstreamUrl.optional(), gemini: UpstreamUrl.optional() });
export type ProviderUpstreams = z.infer<typeof ProviderUpstreams>;

/** The variable each provider's SDKs read for their base URL (Python and JS alike). */
const BASE_URL_VARIABLE: Record<ProviderName, string> = {
  anthropic: 'ANTHROPIC_BASE_URL',
  gemini: 'GOOGLE_GEMINI_BASE_URL',
};

/**
 * Base-URL variables some SDKs prefer to the provider's own, pointed at the rollout too when the user set
 * them (LangChain's `@langchain/anthropic` and `langchain-anthropic` read ANTHROPIC_API_URL first).
 */
const PREFERRED_BASE_URL_VARIABLES: Record<ProviderName, readonly string[]> = {
  anthropic: ['ANTHROPIC_API_URL'],
  gemini: [],
};

/** Sent as the API key only when the user has none: the daemon then forwards its own key upstream. */
export const PLACEHOLDER_API_KEY = 'lightning-placeholder-key';

export interface AgentEnvInput {
  /** `http://127.0.0.1:PORT/r/<key>`. */
  readonly url: string;
  readonly rolloutId: string;
  readonly task: Json | null;
  /** The environment the agent would have had without Lightning. */
  readonly base: Readonly<Record<string, string | undefined>>;
  /**
   * The Node capture preload (`dist/capture-preload.js`, capture/nodePreload.ts), added to NODE_OPTIONS:
   * calls a Node agent makes to the providers' own hosts go through the rollout URL. Absent where the
   * file is not on the agent's machine (Ray nodes).
   */
  readonly nodePreload?: string;
  /**
   * The folder of the Python capture `sitecustomize.py` (trainer-daemon/python/lightning_capture), put first
   * on PYTHONPATH: the same routing for a Python agent's `httpx` and `requests` calls.
   */
  readonly pythonSiteDir?: string;
}

/** NODE_OPTIONS with `--require FILE` added after the user's own options. */
export function withNodeRequire(options: string | undefined, file: string): string {
  return [options, `--require ${JSON.stringify(file)}`].filter(Boolean).join(' ');
}

export function instrumentationEnv({
  url,
  rolloutId,
  task,
  base,
  nodePreload,
  pythonSiteDir,
}: AgentEnvInput): Record<string, string> {
  const env: Record<string, string> = {
    LIGHTNING_URL: url,
    LIGHTNING_ROLLOUT_ID: rolloutId,
    OPENAI_BASE_URL: `${url}/v1`,
    OPENAI_API_BASE: `${url}/v1`,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${url}/v1/traces`,
    OTEL_RESOURCE_ATTRIBUTES: [base.OTEL_RESOURCE_ATTRIBUTES, `lightning.rollout_id=${rolloutId}`]
      .filter(Boolean)
      .join(','),
  };
  for (const variable of Object.values(BASE_URL_VARIABLE)) env[variable] = url;
  for (const variable of Object.values(PREFERRED_BASE_URL_VARIABLES).flat()) if (base[variable]) env[variable] = url;
  if (nodePreload) env.NODE_OPTIONS = withNodeRequire(base.NODE_OPTIONS, nodePreload);
  // POSIX's separator: native Windows is not supported (WSL is).
  if (pythonSiteDir) env.PYTHONPATH = [pythonSiteDir, base.PYTHONPATH].filter(Boolean).join(':');
  if (!base.OPENAI_API_KEY) env.OPENAI_API_KEY = PLACEHOLDER_API_KEY;
  // The SDKs refuse to start without a key; a placeholder lets a keyless local server or the policy answer.
  if (!base.ANTHROPIC_API_KEY && !base.ANTHROPIC_AUTH_TOKEN) env.ANTHROPIC_API_KEY = PLACEHOLDER_API_KEY;
  if (!base.GEMINI_API_KEY && !base.GOOGLE_API_KEY) env.GEMINI_API_KEY = PLACEHOLDER_API_KEY;
  if (task !== null) env.LIGHTNING_TASK = JSON.stringify(task);
  return env;
}

/**
 * The upstream a rollout's LLM calls go to: the user's own OPENAI_BASE_URL (or OPENAI_API_BASE)
 * when they set one, so that capture never changes which model answers; else null (the daemon's).
 */
export function userUpstream(base: Readonly<Record<string, string | undefined>>): string | null {
  const configured = base.OPENAI_BASE_URL || base.OPENAI_API_BASE;
  return configured ? configured.replace(/\/+$/, '') : null;
}

/**
 * The user's own ANTHROPIC_BASE_URL (else ANTHROPIC_API_URL) and GOOGLE_GEMINI_BASE_URL: where those
 * calls go, as userUpstream is for OpenAI's.
 */
export function userProviderUpstreams(base: Readonly<Record<string, string | undefined>>): ProviderUpstreams {
  const upstreams: ProviderUpstreams = {};
  for (const name of ProviderName.options) {
    const configured = providerBaseVariables(name)
      .map((variable) => base[variable])
      .find(Boolean);
    if (configured) upstreams[name] = configured.replace(/\/+$/, '');
  }
  return upstreams;
}

/** The variables a provider's base URL is read from, in the order userProviderUpstreams reads them. */
export function providerBaseVariables(name: ProviderName): string[] {
  return [BASE_URL_VARIABLE[name], ...PREFERRED_BASE_URL_VARIABLES[name]];
}
