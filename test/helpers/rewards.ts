/**
 * Recorded rollouts for reward tests and benchmarks: LLM calls shaped as the proxy records them
 * (request and response attributes), tool calls, a final answer, and a final status.
 */
import type { Json, RolloutStatus, SpanInput } from '../../trainer-daemon/protocol';
import type { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import type { Store } from '../../trainer-daemon/store/store';
import { llmSpan } from './spans';
import { parsed } from './params';

export interface RecordedRollout {
  /** The last LLM call's assistant content (null: the last call only asked for tools). */
  readonly answer: string | null;
  /** Tools the agent's LLM calls asked for, one call each, before the last call. */
  readonly tools?: readonly string[];
  readonly status?: Extract<RolloutStatus, 'succeeded' | 'failed' | 'timeout'>;
  readonly task?: { id?: string; input: Json };
  readonly datasetId?: string;
  /** Extra spans (tool spans, error spans, a `lightning.answer` report). */
  readonly extraSpans?: readonly SpanInput[];
  readonly tokens?: { prompt: number; completion: number };
}

function call(message: Json, tokens: { prompt: number; completion: number }): SpanInput {
  return llmSpan({
    promptTokens: tokens.prompt,
    completionTokens: tokens.completion,
    attributes: {
      'lightning.api': 'chat.completions',
      'gen_ai.request.model': 'test-model',
      'lightning.request': { model: 'test-model', messages: [{ role: 'user', content: 'question' }] },
      'lightning.response': { id: 'x', choices: [{ index: 0, message, finish_reason: 'stop' }] },
    },
  });
}

/** The spans of a recorded rollout: one LLM call per tool, the answering call, then any extra spans. */
function rolloutSpans(rollout: RecordedRollout): SpanInput[] {
  const tokens = rollout.tokens ?? { prompt: 20, completion: 5 };
  return [
    ...(rollout.tools ?? []).map((name, i) =>
      call(
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: `call_${i}`, type: 'function', function: { name, arguments: '{"x":1}' } }],
        },
        tokens,
      ),
    ),
    call({ role: 'assistant', content: rollout.answer }, tokens),
    ...(rollout.extraSpans ?? []),
  ];
}

const finalTransition = (rollout: RecordedRollout) => ({
  to: rollout.status ?? 'succeeded',
  error: rollout.status === 'failed' ? 'exited with code 1' : null,
});

/** Records one finished rollout in a store this process owns; returns its id. */
export function recordRollout(store: Store, rollout: RecordedRollout): string {
  const id = store.createRollout(
    parsed('createRollout', { task: rollout.task ?? null, datasetId: rollout.datasetId ?? null }),
  ).id;
  store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
  store.addSpans({ rolloutId: id, spans: rolloutSpans(rollout) });
  store.transitionRollout(parsed('transitionRollout', { id, ...finalTransition(rollout) }));
  return id;
}

/** Records one finished rollout through a daemon's RPC; returns its id. */
export async function recordRolloutRpc(client: RpcClient, rollout: RecordedRollout): Promise<string> {
  const { id } = await client.request('createRollout', {
    task: rollout.task ?? null,
    datasetId: rollout.datasetId ?? null,
  });
  await client.request('transitionRollout', { id, to: 'running' });
  await client.request('addSpans', { rolloutId: id, spans: rolloutSpans(rollout) });
  await client.request('transitionRollout', { id, ...finalTransition(rollout) });
  return id;
}
