/**
 * The environment an instrumented agent receives (DESIGN.md, "What an instrumented agent
 * receives"). One pure function, used by `lightning run` and by the extension's Debug with
 * Lightning, so both inject exactly the same variables.
 */
import type { Json } from './records';

/** Sent as the API key only when the user has none: the daemon then forwards its own key upstream. */
export const PLACEHOLDER_API_KEY = 'lightning-placeholder-key';

export interface AgentEnvInput {
  /** `http://127.0.0.1:PORT/r/<key>`. */
  readonly url: string;
  readonly rolloutId: string;
  readonly task: Json | null;
  /** The environment the agent would have had without Lightning. */
  readonly base: Readonly<Record<string, string | undefined>>;
}

export function instrumentationEnv({ url, rolloutId, task, base }: AgentEnvInput): Record<string, string> {
  const env: Record<string, string> = {
    LIGHTNING_URL: url,
    LIGHTNING_ROLLOUT_ID: rolloutId,
    OPENAI_BASE_URL: `${url}/v1`,
    OPENAI_API_BASE: `${url}/v1`,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${url}/v1/traces`,
    OTEL_RESOURCE_ATTRIBUTES: [base.OTEL_RESOURCE_ATTRIBUTES, `lightning.rollout_id=${rolloutId}`].filter(Boolean).join(','),
  };
  if (!base.OPENAI_API_KEY) env.OPENAI_API_KEY = PLACEHOLDER_API_KEY;
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
