/**
 * A store for the editor tabs' end-to-end test, written before the daemon starts: a 2,000-span
 * rollout, three 200-step rollouts of one task (the second and third differ in some questions and answers),
 * and a GRPO run (with real checkpoints, test/helpers/checkpoints.ts) whose iterations have metrics
 * and whose first iteration's training batch has a best and a worst rollout.
 */
import type { Span, SpanInput } from '../../trainer-daemon/protocol';
import { grpoIterationBatchId } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { storeWithCheckpoints } from './checkpoints';
import { agentRollout, type AgentRolloutOptions } from './editorFixtures';
import { parsed } from './params';

export interface EditorStore {
  readonly storeFile: string;
  readonly big: string;
  /** Another 2,000-span rollout: opened into the preview tab the first one made. */
  readonly big2: string;
  readonly before: string;
  readonly after: string;
  /** A third 200-step rollout of the task: compared into the Compare tab the first pair opened. */
  readonly after2: string;
  readonly runId: string;
  readonly checkpointIds: [string, string];
  readonly best: string;
  readonly worst: string;
}

const input = (span: Span): SpanInput => {
  const { rolloutId: _r, attempt: _a, sequence: _s, ...rest } = span;
  return rest;
};

export async function editorStore(workspace: string): Promise<EditorStore> {
  const { storeFile, runId, ids } = await storeWithCheckpoints(workspace, ['node', 'agent.mjs']);
  const store = Store.open(storeFile);
  try {
    let idBase = 0;
    const rollout = (
      label: string,
      steps: number,
      options: AgentRolloutOptions,
      extra: { batchId?: string; reward?: number } = {},
    ): string => {
      const created = store.createRollout(
        parsed('createRollout', {
          label,
          task: { id: label.startsWith('cmp') ? 'task-cmp' : label, input: { question: label } },
          ...(extra.batchId ? { batchId: extra.batchId, mode: 'train' } : {}),
        }),
      );
      store.transitionRollout(parsed('transitionRollout', { id: created.id, to: 'running' }));
      idBase += 10_000;
      const spans = agentRollout(steps, { ...options, idBase, rolloutId: created.id }).map(input);
      for (let i = 0; i < spans.length; i += 500)
        store.addSpans({ rolloutId: created.id, spans: spans.slice(i, i + 500) });
      if (extra.reward !== undefined)
        store.addReward(parsed('addReward', { rolloutId: created.id, value: extra.reward, source: 'rule' }));
      store.transitionRollout(parsed('transitionRollout', { id: created.id, to: 'succeeded' }));
      return created.id;
    };
    const big = rollout('big-2000', 1_000, { history: false, errorEvery: 50 });
    const big2 = rollout('big-2000-b', 1_000, { history: false, errorEvery: 40 });
    const before = rollout('cmp-before', 200, {});
    const after = rollout('cmp-after', 200, {
      question: (i) => (i % 9 === 4 ? `Compute ${i} + ${i} with the tool, please` : `What is ${i} plus ${i}?`),
      answer: (i) => `The answer is ${i % 10 === 0 ? 2 * i + 1 : 2 * i}.`,
    });
    const after2 = rollout('cmp-after-b', 200, {
      question: (i) => (i % 7 === 3 ? `Add ${i} and ${i} with the tool` : `What is ${i} plus ${i}?`),
      answer: (i) => `The answer is ${i % 8 === 0 ? 2 * i - 1 : 2 * i}.`,
    });
    const batchId = grpoIterationBatchId(runId, 1);
    const best = rollout('iteration-1-best', 2, {}, { batchId, reward: 0.9 });
    const worst = rollout('iteration-1-worst', 2, {}, { batchId, reward: 0.1 });
    rollout('iteration-1-middle', 2, {}, { batchId, reward: 0.5 });
    for (const step of [1, 2])
      store.recordTrainingStep(runId, step, {
        'reward/mean': 0.3 * step,
        'reward/std': 0.1,
        loss: 1 / step,
        kl: 0.01 * step,
        entropy: 5 - step * 0.1,
        tokensPerSecond: 900 + step * 100,
      });
    return { storeFile, big, big2, before, after, after2, runId, checkpointIds: ids, best, worst };
  } finally {
    store.close();
  }
}
