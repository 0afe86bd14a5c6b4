/**
 * Start Training's several policies: the dataset's seen names as picks → policies → the GrpoConfig the daemon accepts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { policyFor, PolicyName, type TrainingRun } from '../../trainer-daemon/protocol';
import { runLabel } from '../../trainer-daemon/protocol/runLabel';
import { testGrpoConfig } from '../helpers/trainingConfigs';
import {
  describePolicies,
  policiesFromPicks,
  policyNameFor,
  policyPickItems,
} from '../../extension/training/policyPicks';
import { DEFAULT_SETTINGS, grpoConfig } from '../../extension/training/grpoSettings';
import type { AgentCommand } from '../../extension/debug/launchCommand';

const agent: AgentCommand = { argv: ['node', '/ws/agent.mjs'], cwd: '/ws', env: {}, notes: [] };

describe('Start Training: policies picked from the names a dataset’s calls went by', () => {
  it('offers agents first, then models, each with how often it was seen', () => {
    const items = policyPickItems({
      rollouts: 4,
      agents: [{ name: 'planner', calls: 4, rollouts: 4 }],
      models: [
        { name: 'solver-model', calls: 1, rollouts: 1 },
        { name: 'critic', calls: 8, rollouts: 4 },
      ],
    });
    assert.deepEqual(
      items.map((item) => [item.label, item.description, item.pick.kind]),
      [
        ['planner', 'agent · 4 calls in 4 rollouts', 'agent'],
        ['solver-model', 'model · 1 call in 1 rollout', 'model'],
        ['critic', 'model · 8 calls in 4 rollouts', 'model'],
      ],
    );
  });

  it('makes any seen name a valid, distinct policy name', () => {
    const cases: [string, string][] = [
      ['planner', 'planner'],
      ['Research Agent (v2)', 'Research-Agent-v2'],
      ['42-solver', 'solver'],
      ['base', 'base-policy'],
      ['default', 'default-policy'],
      ['🤖', 'policy'],
      ['a'.repeat(80), 'a'.repeat(32)],
    ];
    for (const [seen, name] of cases) {
      assert.equal(policyNameFor(seen, new Set()), name, seen);
      assert.ok(PolicyName.safeParse(name).success, name);
    }
    assert.equal(policyNameFor('planner', new Set(['planner', 'planner-2'])), 'planner-3');
  });

  it('each pick routes exactly its own name, metacharacters and all', () => {
    const policies = policiesFromPicks([
      { kind: 'agent', name: 'planner.v1' },
      { kind: 'model', name: 'gpt-4o (mini)' },
      { kind: 'agent', name: 'planner v1' },
    ]);
    assert.deepEqual(
      policies.map((p) => [p.name, p.match]),
      [
        ['planner-v1', '^planner\\.v1$'],
        ['gpt-4o-mini', '^gpt-4o \\(mini\\)$'],
        ['planner-v1-2', '^planner v1$'],
      ],
    );
    const compiled = policies.map((p) => ({ name: p.name, match: new RegExp(p.match) }));
    assert.equal(policyFor(compiled, { agent: 'planner.v1', model: 'x' }).policy, 'planner-v1');
    assert.equal(policyFor(compiled, { agent: 'plannerXv1', model: 'x' }).policy, 'base', 'the dot is a dot');
    assert.equal(policyFor(compiled, { agent: null, model: 'gpt-4o (mini)' }).policy, 'gpt-4o-mini');
    assert.equal(describePolicies(policies), 'planner-v1, gpt-4o-mini, planner-v1-2 (one LoRA adapter each)');
    assert.equal(describePolicies([]), 'one: every call trains the one adapter');
  });

  it('become the run’s policies on a Hugging Face model; the tiny model is refused naming why', () => {
    const policies = policiesFromPicks([
      { kind: 'agent', name: 'planner' },
      { kind: 'model', name: 'solver-model' },
    ]);
    const hf = grpoConfig({
      model: { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B-Instruct' },
      dataset: 'roles',
      command: agent,
      settings: DEFAULT_SETTINGS,
      policies,
    });
    assert.ok(hf.ok, hf.ok ? '' : hf.message);
    assert.deepEqual(
      hf.value.policies.map((p) => [p.name, p.match, p.reward]),
      [
        ['planner', '^planner$', 'reward'],
        ['solver-model', '^solver-model$', 'reward'],
      ],
    );
    const none = grpoConfig({
      model: { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B-Instruct' },
      dataset: 'roles',
      command: agent,
      settings: DEFAULT_SETTINGS,
      policies: [],
    });
    assert.ok(none.ok && none.value.policies.length === 0, 'no pick: one adapter, as before');
    const tiny = grpoConfig({
      model: { kind: 'tiny' },
      dataset: 'roles',
      command: agent,
      settings: DEFAULT_SETTINGS,
      policies,
    });
    assert.ok(!tiny.ok);
    assert.match(tiny.message, /policies.*Hugging Face/);
  });

  it('names the run by its policies after its model, in the panel, the run tab and the runs list', () => {
    const run = (policies: { name: string; match: string }[]): TrainingRun => ({
      id: 'train-1',
      status: 'running',
      createdAt: 0,
      startedAt: null,
      endedAt: null,
      error: null,
      errorKind: null,
      cancelRequested: false,
      algorithm: 'grpo',
      result: null,
      config: testGrpoConfig({ model: { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B-Instruct' }, dataset: 'roles', policies }),
    });
    assert.equal(runLabel(run([])), 'GRPO Qwen/Qwen2.5-0.5B-Instruct on roles');
    assert.equal(
      runLabel(
        run(
          policiesFromPicks([
            { kind: 'agent', name: 'planner' },
            { kind: 'model', name: 'solver' },
          ]),
        ),
      ),
      'GRPO Qwen/Qwen2.5-0.5B-Instruct [planner, solver] on roles',
    );
  });
});
