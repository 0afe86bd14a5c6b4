/**
 * The optimizer's own LLM calls (critiques and edits). Each attempt is a rollout of mode
 * `optimizer` and goes through the daemon's proxy like any agent's call, so it is recorded and can
 * be inspected next to the agent rollouts it was about. Calls are counted against the run's
 * budget; a failed or unusable answer is retried, then reported to the caller.
 */
import { errorMessage, LightningError } from '../protocol/errors';
import type { RunnerClient } from '../runner/pool';
import { BodyOverLimitError } from '../util/boundedBody';
import { postJson } from '../util/httpPost';

export interface ChatMessage {
  readonly role: 'system' | 'user';
  readonly content: string;
}

/** The call budget is spent: the run stops cleanly. */
export class BudgetExhaustedError extends LightningError {}

export interface OptimizerLlmOptions {
  /** The daemon's RPC methods (`agentRuns/start`, `rollouts/transition`), in process. */
  readonly client: RunnerClient;
  readonly runId: string;
  /** The upstream for these calls (the user's OPENAI_BASE_URL), or null for the daemon's. */
  readonly upstream: string | null;
  /** The user's own API key, passed through as an agent's would be (never stored). */
  readonly apiKey: string | undefined;
  readonly temperature: number;
  readonly seed: number;
  readonly budgetCalls: number;
  readonly attempts: number;
  /**
   * The most bytes of one answer read (the daemon's LIGHTNING_MAX_UPSTREAM_BODY_BYTES, the proxy's own cap): past it
   * the attempt fails.
   */
  readonly maxAnswerBytes: number;
}

export class OptimizerLlm {
  private used = 0;

  constructor(private readonly options: OptimizerLlmOptions) {}

  get callsUsed(): number {
    return this.used;
  }

  /**
   * Asks `model` and returns `accept(answer)`; an error from the call or from `accept` (an unusable
   * answer) costs an attempt. Throws the last error once the attempts are spent, or
   * BudgetExhaustedError when the budget ends first.
   */
  async ask<T>(
    purpose: string,
    model: string,
    messages: readonly ChatMessage[],
    accept: (answer: string) => T,
  ): Promise<T> {
    let last: unknown;
    for (let attempt = 1; attempt <= this.options.attempts; attempt += 1) {
      if (this.used >= this.options.budgetCalls)
        throw new BudgetExhaustedError(`the budget of ${this.options.budgetCalls} LLM calls is spent`);
      this.used += 1;
      try {
        return await this.call(`${purpose} (attempt ${attempt})`, model, messages, accept);
      } catch (error) {
        last = error;
      }
    }
    throw last instanceof Error ? last : new LightningError(String(last));
  }

  /** One attempt, as one `optimizer` rollout: failed when the call fails or its answer is refused. */
  private async call<T>(
    label: string,
    model: string,
    messages: readonly ChatMessage[],
    accept: (answer: string) => T,
  ): Promise<T> {
    const { client, runId } = this.options;
    const { rollout, url } = await client.request('startAgentRun', {
      mode: 'optimizer',
      label: `apo ${runId}: ${label}`,
      // Grouped under the run (the panel's list), not among the user's own runs.
      batchId: `${runId}-optimizer`,
      source: { kind: 'api', client: `lightning apo ${runId}` },
      upstream: this.options.upstream,
    });
    try {
      // Not fetch: its 300 s wait for headers would end a slow model's answer before the daemon's upstream timeout.
      const response = await postJson(
        `${url}/v1/chat/completions`,
        JSON.stringify({ model, messages, temperature: this.options.temperature, seed: this.options.seed }),
        {
          headers: this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {},
          maxBytes: this.options.maxAnswerBytes,
        },
      ).catch((error: unknown) => {
        if (!(error instanceof BodyOverLimitError)) throw error;
        throw new LightningError(
          `${model} answered with more than ${error.limit} bytes (LIGHTNING_MAX_UPSTREAM_BODY_BYTES); a critique or an edited prompt is far smaller: check the model and its max_tokens`,
        );
      });
      const { text } = response;
      if (response.status < 200 || response.status >= 300)
        throw new LightningError(`${model} answered HTTP ${response.status}: ${text.slice(0, 300)}`);
      const accepted = accept(contentOf(text));
      await client.request('transitionRollout', { id: rollout.id, to: 'succeeded' });
      return accepted;
    } catch (error) {
      await client.request('transitionRollout', { id: rollout.id, to: 'failed', error: errorMessage(error) });
      throw error;
    }
  }
}

/** The first choice's message text of a chat completion; an error for anything else. */
function contentOf(body: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new LightningError('the model answered with something that is not JSON');
  }
  const content = (parsed as { choices?: Array<{ message?: { content?: unknown } }> }).choices?.[0]?.message?.content;
  if (typeof content !== 'string' || content.trim() === '')
    throw new LightningError('the model answered without any text');
  return content;
}
