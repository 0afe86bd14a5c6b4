/**
 * Several policies in one GRPO run (protocol/policies.ts): the `--policy` and `--agent` flags and their errors, the
 * proxy's routing of each call to its policy's adapter (capture/policyRoutes.ts), what each policy trains on
 * (training/grpoPolicies.ts; one --policy trains what --agent trains), retention per policy, and a set of charts each.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig, type Checkpoint, type Reward, type SpanInput } from '../../trainer-daemon/protocol';
import { grpoCharts } from '../../trainer-daemon/protocol/ui/grpoCharts';
import { baggageAgentName, PolicyRouter } from '../../trainer-daemon/capture/policyRoutes';
import { grpoConfigFromFlags, type GrpoFlags } from '../../trainer-daemon/cli/commands/trainGrpo';
import { grpoAdvantageOptions, toWorkerTransitions, workerTrainParams } from '../../trainer-daemon/training/grpoUpdate';
import {
  checkpointPolicy,
  groupMetrics,
  iterationTransitions,
  policyValMetrics,
  resumePolicies,
} from '../../trainer-daemon/training/grpoPolicies';
import { planRetention } from '../../trainer-daemon/training/retention';
import { iterationCells, policyLines } from '../../trainer-daemon/training/follow';
import { checkpointPolicyName, checkpointTitle } from '../../trainer-daemon/protocol/policyCheckpoint';
import { exportFolder } from '../../extension/checkpoints/exportChoices';
import { Store } from '../../trainer-daemon/store/store';
import { runCli } from '../helpers/daemon';
import { llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';
import { testGrpoConfig } from '../helpers/trainingConfigs';

const HF = '/models/qwen';

function flags(extra: Partial<GrpoFlags>): GrpoConfig {
  return grpoConfigFromFlags(
    { store: 'store.db', algorithm: 'grpo', model: HF, dataset: 'd', ...extra },
    ['node', 'agent.js'],
    '/w',
  );
}

test('--policy NAME=REGEX: policies in order on a Hugging Face model; each bad use is refused naming the flag and the fix', () => {
  const config = flags({ policy: ['planner=^planner$', 'solver=^solver'] });
  assert.deepEqual(config.policies, [
    { name: 'planner', match: '^planner$', reward: 'reward' },
    { name: 'solver', match: '^solver', reward: 'reward' },
  ]);
  assert.deepEqual(flags({}).policies, [], 'no --policy: one policy, as before');
  assert.deepEqual(
    flags({ policy: ['planner=^planner$', 'solver=^solver'], policyReward: ['solver=format'] }).policies.map(
      (p) => p.reward,
    ),
    ['reward', 'format'],
  );
  assert.throws(
    () => flags({ policy: ['a=x'], policyReward: ['b=r'] }),
    /--policy-reward b=r: no --policy b \(the policies are a\)/,
  );
  assert.throws(
    () => flags({ policy: ['a=x'], policyReward: ['a'] }),
    /--policy-reward "a": give NAME=VALUE, e.g. planner=plan_quality/,
  );
  assert.throws(() => flags({ policyReward: ['a=r'] }), /--policy-reward a=r: no --policy a$/);
  assert.equal(flags({ agent: '^solver$' }).agent, '^solver$', '--agent reaches a grpo run');
  assert.throws(() => flags({ policy: ['planner=(['] }), /--policy planner=\(\[: not a regular expression/);
  assert.throws(() => flags({ policy: ['planner'] }), /--policy "planner": give NAME=VALUE/);
  assert.throws(() => flags({ policy: ['a=x', 'a=y'] }), /--policy a: given twice/);
  assert.throws(() => flags({ policy: ['base=x'] }), /--policy: .*reserved/);
  assert.throws(() => flags({ policy: ['9lives=x'] }), /--policy: .*a letter/);
  assert.throws(() => flags({ agent: '([' }), /--agent \(\[: not a regular expression/);
  assert.throws(
    () => flags({ policy: ['a=x'], agent: 'x' }),
    /--agent: with --policy each policy's REGEX chooses its calls/,
  );
  assert.throws(() => flags({ model: 'tiny', policy: ['a=x'] }), /--policy: .*tiny built-in policy has no adapters/);
  assert.throws(
    () => flags({ policy: ['a=x'], nprocPerNode: '2', fsdp: true }),
    /--nproc-per-node .*--fsdp: .*without --fsdp/,
  );
  assert.throws(
    () => flags({ policy: ['a=x'], warmStart: 'demo.jsonl' }),
    /--warm-start: a warm start trains one policy/,
  );
  assert.equal(
    flags({ policy: ['a=x'], nprocPerNode: '2' }).distributed?.nprocPerNode,
    2,
    'torchrun without FSDP: every rank holds every adapter',
  );
  assert.ok(
    !GrpoConfig.safeParse({
      ...testGrpoConfig(),
      model: { kind: 'hf', name: HF },
      adapter: { kind: 'full' },
      policies: [{ name: 'a', match: 'x' }],
    }).success,
  );
});

test('baggage: the agent name from gen_ai.agent.name, else agent.name, percent-decoded; properties and other members ignored', () => {
  assert.equal(baggageAgentName('user.id=7,gen_ai.agent.name=plan%20ner;ttl=3'), 'plan ner');
  assert.equal(baggageAgentName(['agent.name=solver', 'x=y']), 'solver');
  assert.equal(baggageAgentName('agent.name=solver,gen_ai.agent.name=planner'), 'planner', 'the GenAI key first');
  assert.equal(baggageAgentName(undefined), null);
  assert.equal(baggageAgentName('=x,junk,gen_ai.agent.name='), null);
});

/** A call's span as the proxy records it: a whole chat answer with exact token ids. */
function callSpan(callIndex: number, agentName: string, tokens: number[]): SpanInput {
  return llmSpan({
    attributes: {
      'lightning.api': 'chat.completions',
      'lightning.call_index': callIndex,
      'gen_ai.agent.name': agentName,
      'lightning.request': { model: 'm', messages: [{ role: 'user', content: agentName }] },
      'lightning.response': {
        id: `r${callIndex}`,
        choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }],
      },
      'lightning.prompt_token_ids': [1, 2],
      'lightning.response_token_ids': tokens,
    },
  });
}

test("routing: each call to its policy's adapter by baggage, else model; none: the base; the span says which; other upstreams untouched", (t) => {
  const router = new PolicyRouter();
  const server = 'http://127.0.0.1:9/p/key';
  const registered = router.register(
    [`${server}/v1`, `${server}/greedy/v1`],
    [
      { name: 'planner', match: '^planner$', reward: 'reward' },
      { name: 'solver', match: '^solver', reward: 'reward' },
    ],
  );
  t.after(() => registered.dispose());
  const call = (index: number, model: string) => ({ rolloutId: 'r', callIndex: index, json: { model } });
  assert.equal(
    router.route(`${server}/v1`, call(0, 'policy'), { baggage: 'gen_ai.agent.name=planner' }),
    `${server}/adapter/planner/v1`,
  );
  assert.equal(router.route(`${server}/greedy/v1/`, call(1, 'solver-model'), {}), `${server}/greedy/adapter/solver/v1`);
  assert.equal(
    router.route(`${server}/v1`, call(2, 'critic'), { baggage: 'gen_ai.agent.name=critic' }),
    `${server}/base/v1`,
  );
  assert.equal(
    router.route('https://api.example/v1', call(3, 'gpt'), { baggage: 'agent.name=writer' }),
    'https://api.example/v1',
    'not a policy server',
  );
  assert.equal(router.route(null, call(4, 'gpt'), {}), null);
  const spans = [0, 1, 2, 3, 4].map((i) => callSpan(i, 'x', [3]));
  for (const span of spans) delete span.attributes['gen_ai.agent.name'];
  spans.forEach((span) => router.stamp(span, 'r'));
  assert.deepEqual(
    spans.map((s) => [
      s.attributes['lightning.policy'],
      s.attributes['lightning.policy_route'],
      s.attributes['gen_ai.agent.name'],
    ]),
    [
      ['planner', 'agent:planner', 'planner'],
      ['solver', 'model:solver-model', undefined],
      ['base', 'none', 'critic'],
      [undefined, undefined, 'writer'],
      [undefined, undefined, undefined],
    ],
    "every call's baggage agent name is recorded, routed or not",
  );
  const named = callSpan(6, 'own', [3]);
  router.noteAgent(call(6, 'gpt'), { baggage: 'gen_ai.agent.name=other' });
  router.stamp(named, 'r');
  assert.equal(named.attributes['gen_ai.agent.name'], 'own', "a span's own agent name stays");
  const late = callSpan(0, 'x', [3]);
  router.stamp(late, 'r');
  assert.equal(late.attributes['lightning.policy'], undefined, 'each routing stamps one span');
  registered.dispose();
  assert.equal(router.route(`${server}/v1`, call(5, 'solver-model'), {}), `${server}/v1`, 'the run ended: no routing');
});

test('each policy trains on the calls its adapter answered (one --policy exactly what --agent trains), its groups and unrated rollouts counted as its own; export --policy writes those calls', async (t) => {
  const storeFile = path.join(tempDir(t), 'store.db');
  const store = Store.open(storeFile);
  t.after(() => store.close());
  const router = new PolicyRouter();
  const server = 'http://127.0.0.1:9/p/k/v1';
  const policies = [
    { name: 'planner', match: '^planner$', reward: 'reward' },
    { name: 'solver', match: '^solver$', reward: 'reward' },
  ];
  router.register([server], policies);
  for (const [sample, value] of [1, 0].entries()) {
    const { id } = store.createRollout(parsed('createRollout', { task: { id: 'task', input: null } }));
    const spans = ['planner', 'solver', 'critic'].map((agent, callIndex) => {
      router.route(
        server,
        { rolloutId: id, callIndex, json: { model: 'm' } },
        { baggage: `gen_ai.agent.name=${agent}` },
      );
      const span = callSpan(callIndex, agent, [10 + callIndex, 20 + sample]);
      router.stamp(span, id);
      return span;
    });
    store.addSpans({ rolloutId: id, spans });
    store.addReward(parsed('addReward', { rolloutId: id, value, source: 'agent' }));
    store.addReward(parsed('addReward', { rolloutId: id, name: 'format', value: 1 - value, source: 'agent' }));
  }
  const trajectories = [...store.trajectories({})];
  const config = testGrpoConfig({ model: { kind: 'hf', name: HF } });
  const advantage = grpoAdvantageOptions(config);
  const both = iterationTransitions(trajectories, { agent: null, policies }, advantage);
  assert.deepEqual(
    both.map((b) => [b.policy, b.transitions.map((tr) => tr.responseTokenIds![0])]),
    [
      ['planner', [10, 10]],
      ['solver', [11, 11]],
    ],
    "the critic's calls (answered by the base) train in neither",
  );
  assert.ok(
    both.every((b) => b.transitions.every((tr) => Math.abs(tr.advantage) > 0.5)),
    'the episode reward, advantages per task group',
  );

  // --policy-reward solver=format: the solver learns from its own dimension (here the opposite of the episode's).
  const ownReward = iterationTransitions(
    trajectories,
    { agent: null, policies: [policies[0]!, { ...policies[1]!, reward: 'format' }] },
    advantage,
  );
  assert.deepEqual(
    ownReward.map((b) => b.transitions.map((tr) => Math.sign(tr.advantage))),
    [
      [1, -1],
      [-1, 1],
    ],
  );

  assert.deepEqual(groupMetrics(ownReward), {
    'policy/planner/zeroVarianceGroups': 0,
    'policy/planner/rollouts/unrewarded': 0,
    'policy/solver/zeroVarianceGroups': 0,
    'policy/solver/rollouts/unrewarded': 0,
  });

  // Task `other`: one rollout the agent rated on the episode's dimension only (the solver, --policy-reward format,
  // trains it with reward 0 and says so), one rated 1 and format 0. Each policy's group has equal rewards: one
  // zero-variance group each, not two summed into one number.
  for (const format of [undefined, 0]) {
    const { id } = store.createRollout(parsed('createRollout', { task: { id: 'other', input: null } }));
    store.addSpans({
      rolloutId: id,
      spans: ['planner', 'solver'].map((agent, callIndex) => {
        router.route(
          server,
          { rolloutId: id, callIndex, json: { model: 'm' } },
          { baggage: `gen_ai.agent.name=${agent}` },
        );
        const span = callSpan(callIndex, agent, [30 + callIndex, 40]);
        router.stamp(span, id);
        return span;
      }),
    });
    store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' }));
    if (format !== undefined)
      store.addReward(parsed('addReward', { rolloutId: id, name: 'format', value: format, source: 'agent' }));
  }
  const unrated = iterationTransitions(
    [...store.trajectories({})],
    { agent: null, policies: [policies[0]!, { ...policies[1]!, reward: 'format' }] },
    advantage,
  );
  assert.deepEqual(groupMetrics(unrated), {
    'policy/planner/zeroVarianceGroups': 1,
    'policy/planner/rollouts/unrewarded': 0,
    'policy/solver/zeroVarianceGroups': 1,
    'policy/solver/rollouts/unrewarded': 1,
  });
  assert.deepEqual(
    groupMetrics(iterationTransitions([...store.trajectories({})], { agent: null, policies: [] }, advantage)),
    { zeroVarianceGroups: 1, 'rollouts/unrewarded': 0 },
    'one policy: the plain names',
  );

  const byAgent = iterationTransitions(trajectories, { agent: '^solver$', policies: [] }, advantage);
  const byPolicy = iterationTransitions(trajectories, { agent: null, policies: [policies[1]!] }, advantage);
  assert.equal(byAgent[0]!.policy, null);
  const params = (b: (typeof byAgent)[number]) =>
    workerTrainParams(config, toWorkerTransitions(b.transitions, config.zeroAdvantage));
  assert.deepEqual(params(byPolicy[0]!), params(byAgent[0]!), 'the same update');
  assert.deepEqual(
    byPolicy[0]!.transitions.map((tr) => tr.spanIds),
    byAgent[0]!.transitions.map((tr) => tr.spanIds),
  );

  // lightning export --policy NAME: the calls that policy's adapter answered, as it trains on them; an unknown name
  // exports nothing and says why.
  const out = path.join(path.dirname(storeFile), 'solver.jsonl');
  const exportPolicy = (name: string) =>
    runCli(['export', '--store', storeFile, '--status', 'queued', '--policy', name, '--out', out]);
  const exported = await exportPolicy('solver');
  assert.equal(exported.code, 0, exported.stderr);
  const rows = fs
    .readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { spanIds: string[] });
  const solver = iterationTransitions(
    [...store.trajectories({})],
    { agent: null, policies: [policies[1]!] },
    advantage,
  );
  assert.deepEqual(
    rows.map((row) => row.spanIds),
    solver[0]!.transitions.map((tr) => tr.spanIds),
  );
  assert.equal(rows.length, 4);
  const unknown = await exportPolicy('critic');
  assert.equal(unknown.code, 0, unknown.stderr);
  assert.match(
    unknown.stderr,
    /no rows written: 4 rollouts with no LLM call to train on \(none recorded, none of --agent or --policy/,
  );
});

test("retention and resume per policy: each policy's checkpoints kept as one run's; each resumes from its own newest", () => {
  const policies = [
    { name: 'planner', match: 'p', reward: 'reward' },
    { name: 'solver', match: 's', reward: 'reward' },
  ];
  const checkpoints: Checkpoint[] = [1, 2, 3].flatMap((step) =>
    policies.map(({ name }, i) => ({
      id: `${step}-${name}`,
      runId: 'r',
      step,
      path: `/c/r/${step}/${name}`,
      metrics: {},
      createdAt: step * 10 + i,
      optimizerState: true,
    })),
  );
  const metrics = [{ step: 1, name: 'val/reward', value: 0.9 }];
  const plan = planRetention(checkpoints, metrics, 1, new Set(), (c) => checkpointPolicy(c, policies));
  assert.deepEqual(plan.remove.map((c) => c.id).sort(), ['2-planner', '2-solver'], 'best (step 1) and last of each');
  assert.deepEqual(
    plan.dropOptimizer.map((c) => c.id).sort(),
    ['1-planner', '1-solver'],
    "each policy's newest keeps its optimizer",
  );
  assert.deepEqual(resumePolicies(checkpoints, policies), [
    { name: 'planner', checkpoint: '/c/r/3/planner' },
    { name: 'solver', checkpoint: '/c/r/3/solver' },
  ]);
  assert.deepEqual(resumePolicies([], policies), [{ name: 'planner' }, { name: 'solver' }]);
  assert.equal(checkpointPolicy({ path: '/c/r/3' }, policies), null);
});

test('charts: one set per policy after the run-wide ones', () => {
  const point = (name: string, value: number) => ({ step: 1, name, value });
  const charts = grpoCharts([
    point('reward/mean', 0.5),
    point('policy/planner/loss', 0.1),
    point('policy/planner/transitions', 4),
    point('policy/solver/loss', 0.2),
    point('policy/solver/kl', 0.01),
    point('policy/solver/val/reward', 0.4),
  ]);
  assert.deepEqual(
    charts.map((c) => c.title),
    [
      'Reward (sampled, ± std)',
      'planner: loss',
      'planner: transitions',
      'solver: validation reward',
      'solver: loss',
      'solver: KL to the reference',
    ],
  );
});

test("a policy's checkpoint is named by its policy in the run tab, Use Checkpoint's pick and Export's folder", () => {
  const planner = { runId: 'train-1', step: 3, path: '/w/.lightning/checkpoints/train-1/3/planner' };
  const single = { runId: 'train-1', step: 3, path: 'C:\\w\\.lightning\\checkpoints\\train-1\\3' };
  assert.equal(checkpointPolicyName(planner), 'planner');
  assert.equal(checkpointPolicyName(single), null);
  assert.equal(checkpointPolicyName({ step: 3, path: '/elsewhere/planner' }), null, 'only under its iteration');
  assert.equal(checkpointTitle(planner), 'iteration 3 · planner');
  assert.equal(checkpointTitle(single, 'step'), 'step 3');
  assert.equal(
    exportFolder('/out', planner, 'peft', () => false),
    '/out/train-1-step3-planner-peft',
  );
  assert.equal(
    exportFolder('/out', single, 'peft', () => false),
    '/out/train-1-step3-peft',
  );
});

test("lightning train's table: a line per policy under its iteration, the seconds of every update counted", () => {
  const metrics = {
    'reward/mean': 0.5,
    'reward/std': 0.1,
    'rollout/seconds': 2,
    'policy/planner/transitions': 4,
    'policy/planner/loss': 0.125,
    'policy/planner/kl': 0.0002,
    'policy/planner/entropy': 2.5,
    'policy/planner/train/seconds': 1,
    'policy/solver/transitions': 4,
    'policy/solver/loss': -0.25,
    'policy/solver/train/seconds': 1.5,
    transitions: 8,
  };
  assert.equal(
    policyLines(metrics),
    '\n  planner: 4 transitions · loss 0.125 · KL 0.0002 · entropy 2.500' +
      '\n  solver: 4 transitions · loss -0.250 · KL - · entropy -',
  );
  assert.equal(iterationCells(1, metrics).at(-1), '4.5', 'rollouts and both updates');
  assert.equal(policyLines({ loss: 0.1, transitions: 3 }), '', 'one policy: its row says it all');
  assert.equal(
    policyLines({ ...metrics, 'val/reward': 0.5, 'policy/planner/val/reward': 0.75 }),
    '\n  planner: 4 transitions · loss 0.125 · KL 0.0002 · entropy 2.500 · val 0.75' +
      '\n  solver: 4 transitions · loss -0.250 · KL - · entropy -',
    'an iteration that validated: each policy its own validation reward',
  );
  assert.equal(
    policyLines({ 'val/reward': 0.5, 'policy/planner/val/reward': 0.25, 'policy/solver/val/reward': 0 }),
    '\n  planner: val 0.25\n  solver: val 0.00',
    'step 0 (before training): validation only, no update',
  );
});

test("each policy's validation reward is the mean of its own reward dimension over the validation rollouts", () => {
  let id = 0;
  const reward = (name: string, value: number, source: Reward['source'] = 'agent'): Reward => ({
    id: ++id,
    rolloutId: 'r',
    spanId: null,
    name,
    value,
    source,
    author: null,
    comment: null,
    reason: null,
    createdAt: id,
  });
  const rollouts = [
    { rewards: [reward('digits', 1), reward('letters', 0.5), reward('reward', 0.75)] },
    // A person's rating wins over the agent's, as in training (credit.ts episodeReward).
    { rewards: [reward('digits', 0), reward('digits', 0.5, 'human'), reward('reward', 0.25)] },
    // No `letters` reward: counts 0, as a training rollout without one is filled.
    { rewards: [reward('digits', 0.5), reward('reward', 0)] },
  ];
  assert.deepEqual(
    policyValMetrics(rollouts, [
      { name: 'planner', reward: 'digits' },
      { name: 'solver', reward: 'letters' },
      { name: 'critic', reward: 'reward' },
    ]),
    {
      'policy/planner/val/reward': 2 / 3,
      'policy/solver/val/reward': 0.5 / 3,
      'policy/critic/val/reward': 1 / 3,
    },
  );
  assert.deepEqual(policyValMetrics([], [{ name: 'planner', reward: 'digits' }]), {}, 'no validation rollouts: none');
});
