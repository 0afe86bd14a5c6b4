/**
 * The judge's calls go through the daemon's own proxy, each as a rollout of its own (mode `debug`,
 * source `api` client `lightning-judge`, labelled with the rollouts it judged): the user sees and
 * audits what the judge was asked and answered, and the judge's rollouts are never scored. The API
 * key is sent per call from the caller's or the daemon's environment; the proxy keeps it out of
 * the store.
 */
import { z } from 'zod';
import type { Store } from '../store/store';
import type { WriteQueue } from '../store/writeQueue';
import { JUDGE_CLIENT } from './job';
import type { JudgeTransport } from './judge';

const ChatReply = z.object({
  choices: z.array(z.object({ message: z.object({ content: z.string().nullish() }) })).min(1),
});

export interface ProxyJudgeOptions {
  readonly store: Store;
  readonly writes?: WriteQueue;
  /** The daemon's base URL (capability URLs hang off it). */
  readonly agentBaseUrl: string;
  /** Keys from the caller, by environment variable name; the daemon's environment is the fallback. */
  readonly apiKeys: Readonly<Record<string, string>>;
  readonly env: NodeJS.ProcessEnv;
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
}

export function proxyJudgeTransport(options: ProxyJudgeOptions): JudgeTransport {
  const write = <T>(op: () => T): T | Promise<T> => (options.writes ? options.writes.submit(op) : op());
  return async (config, judged) => {
    const label = `judge of ${judged.length === 1 ? judged[0] : `${judged.length} rollouts of one task`}`;
    const { rollout, key } = await write(() =>
      options.store.startAgentRun(
        {
          mode: 'debug',
          label,
          task: { input: { judged: [...judged], model: config.model } },
          source: { kind: 'api', client: JUDGE_CLIENT },
          maxAttempts: 1,
          datasetId: null,
          batchId: null,
          resourcesVersion: null,
          resources: {},
        },
        { upstream: config.baseUrl ?? null, tokenIds: false },
      ),
    );
    const apiKey = options.apiKeys[config.apiKeyEnv] ?? options.env[config.apiKeyEnv];
    return {
      complete: async (messages) => {
        const signals = [
          AbortSignal.timeout(options.timeoutMs ?? 120_000),
          ...(options.signal ? [options.signal] : []),
        ];
        const response = await fetch(`${options.agentBaseUrl}/r/${key}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
          body: JSON.stringify({ model: config.model, messages, temperature: config.temperature }),
          signal: AbortSignal.any(signals),
        });
        const text = await response.text();
        if (!response.ok) throw new Error(`the judge model answered HTTP ${response.status}: ${text.slice(0, 300)}`);
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          throw new Error(`the judge model's response is not JSON: ${text.slice(0, 200)}`);
        }
        const reply = ChatReply.safeParse(body);
        if (!reply.success) throw new Error("the judge model's response has no choices[0].message");
        return reply.data.choices[0]!.message.content ?? '';
      },
      finish: async (error) => {
        await write(() =>
          options.store.transitionRollout({
            id: rollout.id,
            to: error === null ? 'succeeded' : 'failed',
            error,
            exitCode: null,
          }),
        );
      },
    };
  };
}
