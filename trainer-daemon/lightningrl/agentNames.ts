/**
 * The names a dataset's recorded LLM calls went by (`datasets/agents`): each call's agent as training attributes it
 * (adapter.ts callAgent: its enclosing agent span, else the agent name its baggage carried) and the model it asked
 * for, counted over the dataset's newest rollouts. Start Training offers them as policies (one LoRA adapter each):
 * a policy's REGEX matches the same names when the call is made (capture/policyRoutes.ts).
 */
import { ListRolloutsParams, type DatasetAgents, type SeenName } from '../protocol';
import type { Store } from '../store/store';
import { callAgent } from './adapter';

/** Spans read per rollout, at most: a name seen in a rollout's first 10,000 spans is offered. */
const SPANS_PER_ROLLOUT = 10_000;

class Tally {
  private readonly seen = new Map<string, { calls: number; rollouts: Set<string> }>();

  add(name: string, rolloutId: string): void {
    const entry = this.seen.get(name) ?? { calls: 0, rollouts: new Set<string>() };
    entry.calls += 1;
    entry.rollouts.add(rolloutId);
    this.seen.set(name, entry);
  }

  /** Most calls first, then by name. */
  list(): SeenName[] {
    return [...this.seen]
      .map(([name, { calls, rollouts }]) => ({ name, calls, rollouts: rollouts.size }))
      .sort((a, b) => b.calls - a.calls || a.name.localeCompare(b.name));
  }
}

export function datasetAgents(store: Store, params: { dataset: string; limit: number }): DatasetAgents {
  const { dataset } = store.listTasks(params.dataset);
  const { items } = store.listRollouts(ListRolloutsParams.parse({ datasetId: dataset.id, limit: params.limit }));
  const agents = new Tally();
  const models = new Tally();
  for (const rollout of items) {
    const spans = store.listSpans(rollout.id, 0, SPANS_PER_ROLLOUT);
    const agentOf = callAgent(spans);
    for (const span of spans) {
      if (span.category !== 'llm') continue;
      const agent = agentOf(span);
      if (agent !== null) agents.add(agent, rollout.id);
      const model = span.attributes['gen_ai.request.model'];
      if (typeof model === 'string' && model !== '') models.add(model, rollout.id);
    }
  }
  return { rollouts: items.length, agents: agents.list(), models: models.list() };
}
