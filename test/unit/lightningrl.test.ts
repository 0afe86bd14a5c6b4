import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import {
  AdvantageOptions,
  RewardPolicy,
  Transition,
  type Json,
  type Reward,
  type SpanInput,
} from '../../trainer-daemon/protocol';
import { extractCalls, repairParents } from '../../trainer-daemon/lightningrl/adapter';
import { creditRewards, episodeReward, rolloutAdvantages } from '../../trainer-daemon/lightningrl/credit';
import { aggregateRollout } from '../../trainer-daemon/lightningrl/aggregate';
import { buildTransitions, toChatExample } from '../../trainer-daemon/lightningrl/transitions';
import { Store } from '../../trainer-daemon/store/store';
import { hex, llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

const policy = RewardPolicy.parse({});
let nextRewardId = 1;
function reward(value: number, source: Reward['source'], extra: Partial<Reward> = {}): Reward {
  return {
    id: nextRewardId++,
    rolloutId: 'r',
    spanId: null,
    name: 'reward',
    value,
    source,
    author: null,
    comment: null,
    reason: null,
    createdAt: 0,
    ...extra,
  };
}

describe('LightningRL: episode reward policy', () => {
  test('latest human annotation, else latest agent reward, else latest automatic; missing → excluded or filled', () => {
    assert.equal(
      episodeReward([reward(0.2, 'agent'), reward(1, 'human'), reward(0.4, 'agent'), reward(0, 'human')], policy),
      0,
    );
    assert.equal(episodeReward([reward(0.2, 'agent'), reward(0.7, 'judge'), reward(0.4, 'agent')], policy), 0.4);
    assert.equal(episodeReward([reward(0.7, 'judge'), reward(0.6, 'rule')], policy), 0.6);
    assert.equal(
      episodeReward(
        [reward(1, 'human', { spanId: 'aaaaaaaaaaaaaaaa' }), reward(1, 'human', { name: 'style' })],
        policy,
      ),
      null,
      'step and other-dimension rewards are not the episode reward',
    );
    assert.equal(episodeReward([], RewardPolicy.parse({ missing: 'fill', fillValue: -1 })), -1);
  });
});

describe('LightningRL: credit assignment (hand-computed)', () => {
  test('identical gives R to every call (the paper)', () => {
    assert.deepEqual(creditRewards(2, [0, 0, 0], { kind: 'identical' }), [2, 2, 2]);
  });
  test('discounted gives γ^(T−t)·R', () => {
    assert.deepEqual(creditRewards(1, [0, 0, 0], { kind: 'discounted', gamma: 0.5 }), [0.25, 0.5, 1]);
  });
  test('step gives each call its step reward, the last one also R', () => {
    assert.deepEqual(creditRewards(1, [0.5, 0, -0.25], { kind: 'step' }), [0.5, 0, 0.75]);
  });
});

describe('LightningRL: advantages (hand-computed)', () => {
  const grpo = AdvantageOptions.parse({});
  test('GRPO: (R − mean)/(std + ε) per task group, one value per rollout', () => {
    const { advantages, stats } = rolloutAdvantages(
      [
        { id: 'a', group: 't1', reward: 1 },
        { id: 'b', group: 't1', reward: 0 },
        { id: 'c', group: 't1', reward: 0 },
        { id: 'd', group: 't1', reward: 1 },
        { id: 'e', group: 't2', reward: 3 },
        { id: 'f', group: 't2', reward: 1 },
      ],
      grpo,
    );
    // The sample std (n − 1) + 1e-4, as TRL: t1: mean 0.5, std √(1/3) → ±0.5/(0.57735 + 1e-4); t2: mean 2, std √2.
    const t1Std = Math.sqrt(1 / 3) + 1e-4;
    const t2Std = Math.sqrt(2) + 1e-4;
    for (const [id, expected] of [
      ['a', 0.5 / t1Std],
      ['b', -0.5 / t1Std],
      ['c', -0.5 / t1Std],
      ['d', 0.5 / t1Std],
      ['e', 1 / t2Std],
      ['f', -1 / t2Std],
    ] as const) {
      assert.ok(Math.abs(advantages!.get(id)! - expected) < 1e-9, `${id}: ${advantages!.get(id)}`);
    }
    // std: 'population' divides by n (t1: std 0.5, t2: std 1).
    const population = rolloutAdvantages(
      [
        { id: 'a', group: 't1', reward: 1 },
        { id: 'b', group: 't1', reward: 0 },
      ],
      AdvantageOptions.parse({ std: 'population' }),
    ).advantages!;
    assert.ok(Math.abs(population.get('a')! - 0.5 / (0.5 + 1e-4)) < 1e-9);
    const t1 = ['a', 'b', 'c', 'd'].reduce((sum, id) => sum + advantages!.get(id)!, 0);
    assert.ok(Math.abs(t1) < 1e-9, 'normalized advantages of a group sum to ~0');
    assert.deepEqual(stats, { singletonGroups: 0, zeroVarianceGroups: 0 });
  });
  test('rewards equal up to floating-point noise count as equal', () => {
    const { advantages, stats } = rolloutAdvantages(
      [0.1, 0.1, 0.1].map((reward, i) => ({
        id: String(i),
        group: 't',
        reward: (reward * 3) / 3 + (i === 1 ? 0.1 + 0.2 - 0.3 : 0),
      })),
      grpo,
    );
    assert.deepEqual([...advantages!.values()], [0, 0, 0]);
    assert.equal(stats.zeroVarianceGroups, 1);
  });

  test('groups of one and all-equal groups get 0 (not NaN) and are reported', () => {
    const { advantages, stats } = rolloutAdvantages(
      [
        { id: 'a', group: 't1', reward: 1 },
        { id: 'b', group: 't2', reward: 1 },
        { id: 'c', group: 't2', reward: 1 },
        { id: 'd', group: null, reward: 5 },
      ],
      grpo,
    );
    assert.deepEqual([...advantages!.values()], [0, 0, 0, 0]);
    assert.deepEqual(stats, { singletonGroups: 2, zeroVarianceGroups: 1 });
  });
  test('without std normalization, baseline and none', () => {
    const rollouts = [
      { id: 'a', group: 't', reward: 3 },
      { id: 'b', group: 't', reward: 1 },
      { id: 'c', group: 'u', reward: 2 },
    ];
    const raw = rolloutAdvantages(rollouts, AdvantageOptions.parse({ normalizeStd: false })).advantages!;
    assert.deepEqual([raw.get('a'), raw.get('b'), raw.get('c')], [1, -1, 0]);
    const baseline = rolloutAdvantages(rollouts, AdvantageOptions.parse({ kind: 'baseline' })).advantages!;
    assert.deepEqual([baseline.get('a'), baseline.get('b'), baseline.get('c')], [1, -1, 0]);
    assert.equal(rolloutAdvantages(rollouts, AdvantageOptions.parse({ kind: 'none' })).advantages, null);
  });
});

function stored(spans: SpanInput[]) {
  return spans.map((span, i) => ({ ...span, rolloutId: 'r', attempt: 1, sequence: i + 1 }));
}

describe('LightningRL: the adapter', () => {
  const trace = hex(16);
  const agent = (name: string, id = hex(8), start = 0, end = 100): SpanInput =>
    llmSpan({
      traceId: trace,
      spanId: id,
      name: `invoke_agent ${name}`,
      category: 'agent',
      startMs: start,
      endMs: end,
      attributes: { 'gen_ai.agent.name': name },
    });
  const call = (parent: string | null, start: number, extra: Partial<SpanInput> = {}): SpanInput =>
    llmSpan({ traceId: trace, parentSpanId: parent, startMs: start, endMs: start + 1, ...extra });

  test('calls come in sequence order, attributed to their enclosing agent; agentMatch selects agents', () => {
    const planner = agent('planner');
    const coder = agent('coder');
    const spans = stored([planner, call(planner.spanId, 1), coder, call(coder.spanId, 2), call(planner.spanId, 3)]);
    assert.deepEqual(
      extractCalls(spans, [], 'reward').map((c) => c.agentName),
      ['planner', 'coder', 'planner'],
    );
    assert.deepEqual(
      extractCalls(spans, [], 'reward', /^cod/).map((c) => [c.agentName, c.span.sequence]),
      [['coder', 4]],
    );
  });

  test('logprobs are one per token or none: an entry without a value drops the list rather than shift it', () => {
    const withLogprobs = (values: Array<number | null>) =>
      call(null, 1, {
        attributes: {
          'lightning.api': 'chat.completions',
          'lightning.response': {
            choices: [
              {
                message: { role: 'assistant', content: 'abc' },
                logprobs: { content: values.map((logprob, i) => ({ token: 'abc'[i]!, logprob })) },
              },
            ],
          },
        },
      });
    const [whole] = extractCalls(stored([withLogprobs([-0.1, -0.2, -0.3])]), [], 'reward');
    assert.deepEqual(whole!.logprobs, [-0.1, -0.2, -0.3]);
    const [gap] = extractCalls(stored([withLogprobs([-0.1, null, -0.3])]), [], 'reward');
    assert.equal(gap!.logprobs, null, 'not [-0.1, -0.3], whose -0.3 would be the second token’s');
  });

  test('a missing parent is repaired by time: the tightest enclosing span of the trace', () => {
    const outer = agent('outer', hex(8), 0, 100);
    const inner = agent('inner', hex(8), 10, 50);
    const orphan = call('ffffffffffffffff', 20);
    const parents = repairParents(stored([outer, inner, orphan]));
    assert.equal(parents.get(orphan.spanId)!.spanId, inner.spanId);
    assert.equal(extractCalls(stored([outer, inner, orphan]), [], 'reward')[0]!.agentName, 'inner');
  });

  test('step rewards: annotations on a call (latest human wins), and reward spans after it', () => {
    const first = call(null, 1);
    const second = call(null, 2);
    const rewardSpan = llmSpan({
      traceId: trace,
      category: 'reward',
      name: 'agentlightning.reward',
      attributes: { 'agentlightning.reward': 0.25 },
      startMs: 3,
      endMs: 3,
    });
    const calls = extractCalls(
      stored([first, second, rewardSpan]),
      [
        reward(0.5, 'agent', { spanId: first.spanId }),
        reward(1, 'human', { spanId: first.spanId }),
        reward(0.9, 'agent', { spanId: first.spanId }),
      ],
      'reward',
    );
    assert.deepEqual(
      calls.map((c) => c.stepReward),
      [1, 0.25],
    );
  });

  test('Agent Lightning’s current reward spans (agentlightning.reward.N.name/value) are read: the trained name, else primary', () => {
    const annotation = (attributes: SpanInput['attributes'], start: number) =>
      llmSpan({
        traceId: trace,
        category: 'reward',
        name: 'agentlightning.annotation',
        attributes,
        startMs: start,
        endMs: start,
      });
    const calls = extractCalls(
      stored([
        call(null, 1),
        annotation({ 'agentlightning.reward.0.name': 'primary', 'agentlightning.reward.0.value': 0.75 }, 3),
        call(null, 4),
        annotation(
          {
            'agentlightning.reward.0.name': 'efficiency',
            'agentlightning.reward.0.value': 0.2,
            'agentlightning.reward.1.name': 'reward',
            'agentlightning.reward.1.value': '1.0',
          },
          6,
        ),
      ]),
      [],
      'reward',
    );
    assert.deepEqual(
      calls.map((c) => c.stepReward),
      [0.75, 1],
    );
  });

  test('a reward span that arrives late is credited to the call that ended before it', () => {
    const first = call(null, 0, { endMs: 10 });
    const second = call(null, 20, { endMs: 30 });
    const late = llmSpan({
      traceId: trace,
      category: 'reward',
      name: 'agentlightning.reward',
      attributes: { 'agentlightning.reward': 1 },
      startMs: 12,
      endMs: 12,
    });
    assert.deepEqual(
      extractCalls(stored([first, second, late]), [], 'reward').map((c) => c.stepReward),
      [1, 0],
    );
  });

  test('with agentMatch, a reward after another agent’s call is that call’s: dropped, never moved to a trained one', () => {
    const coder = agent('coder', hex(8), 0, 10);
    const planner = agent('planner', hex(8), 2, 10);
    const reward = llmSpan({
      traceId: trace,
      category: 'reward',
      name: 'agentlightning.reward',
      attributes: { 'agentlightning.reward': 1 },
      startMs: 5,
      endMs: 5,
    });
    const spans = stored([coder, call(coder.spanId, 1), planner, call(planner.spanId, 3), reward]);
    assert.deepEqual(
      extractCalls(spans, [], 'reward').map((c) => [c.agentName, c.stepReward]),
      [
        ['coder', 0],
        ['planner', 1],
      ],
    );
    assert.deepEqual(
      extractCalls(spans, [], 'reward', /^cod/).map((c) => [c.agentName, c.stepReward]),
      [['coder', 0]],
    );
  });

  test('OpenLLMetry’s flattened messages keep their tool calls and tool results', () => {
    const span = call(null, 1, {
      attributes: {
        'gen_ai.request.model': 'gpt-4o-mini',
        'gen_ai.prompt.0.role': 'user',
        'gen_ai.prompt.0.content': 'Weather in Paris and Rome?',
        'gen_ai.prompt.1.role': 'assistant',
        'gen_ai.prompt.1.tool_calls.0.id': 'call_0',
        'gen_ai.prompt.1.tool_calls.0.name': 'get_weather',
        'gen_ai.prompt.1.tool_calls.0.arguments': '{"city":"Paris"}',
        'gen_ai.prompt.2.role': 'tool',
        'gen_ai.prompt.2.content': 'sunny',
        'gen_ai.prompt.2.tool_call_id': 'call_0',
        'gen_ai.completion.0.role': 'assistant',
        'gen_ai.completion.0.tool_calls.0.id': 'call_1',
        'gen_ai.completion.0.tool_calls.0.name': 'get_weather',
        'gen_ai.completion.0.tool_calls.0.arguments': '{"city":"Rome"}',
      },
    });
    const [extracted] = extractCalls(stored([span]), [], 'reward');
    const weather = (id: string, city: string) => ({
      id,
      type: 'function',
      function: { name: 'get_weather', arguments: JSON.stringify({ city }) },
    });
    assert.deepEqual(extracted!.messages, [
      { role: 'user', content: 'Weather in Paris and Rome?' },
      { role: 'assistant', content: null, tool_calls: [weather('call_0', 'Paris')] },
      { role: 'tool', content: 'sunny', tool_call_id: 'call_0' },
    ]);
    assert.deepEqual(extracted!.message, {
      role: 'assistant',
      content: null,
      tool_calls: [weather('call_1', 'Rome')],
    });
  });

  test('a proxy call takes the agent of its OTLP twin (same response id)', () => {
    const planner = agent('planner');
    const proxied = call(null, 5, {
      attributes: { 'lightning.api': 'chat.completions', 'gen_ai.response.id': 'resp-1' },
    });
    const twin = call(planner.spanId, 5, {
      category: 'other',
      attributes: { 'lightning.same_call_as': proxied.spanId },
    });
    assert.deepEqual(
      extractCalls(stored([planner, proxied, twin]), [], 'reward').map((c) => c.agentName),
      ['planner'],
    );
  });
});

describe('LightningRL: transitions from a store', () => {
  test('two rollouts of one task: GRPO advantages ±1/√2 (sample std) broadcast to every call; schema-valid; chat examples', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const request = (content: string) => ({
      model: 'm',
      messages: [{ role: 'user', content }],
      tools: [{ type: 'function', function: { name: 'calc' } }],
    });
    const response = (content: string | null, tools = false) => ({
      id: hex(4),
      choices: [
        {
          index: 0,
          finish_reason: tools ? 'tool_calls' : 'stop',
          message: {
            role: 'assistant',
            content,
            ...(tools
              ? { tool_calls: [{ id: 'c1', type: 'function', function: { name: 'calc', arguments: '{}' } }] }
              : {}),
          },
        },
      ],
    });
    for (const [value, answer] of [
      [1, '4'],
      [0, '5'],
    ] as const) {
      const { id } = store.createRollout(
        parsed('createRollout', { task: { id: 'two-plus-two', input: { q: '2+2' } } }),
      );
      store.addSpans({
        rolloutId: id,
        spans: [
          llmSpan({
            attributes: {
              'lightning.api': 'chat.completions',
              'lightning.request': request('2+2?'),
              'lightning.response': response(null, true),
              'lightning.prompt_token_ids': [1, 2],
              'lightning.response_token_ids': [3, 4, 5],
            },
          }),
          llmSpan({
            attributes: {
              'lightning.api': 'chat.completions',
              'lightning.request': request('tool said 4'),
              'lightning.response': response(answer),
            },
          }),
        ],
      });
      store.addReward(parsed('addReward', { rolloutId: id, value, source: 'agent' }));
    }
    const unrewarded = store.createRollout(parsed('createRollout', { task: { id: 'other', input: null } })).id;
    store.addSpans({ rolloutId: unrewarded, spans: [llmSpan()] });

    const { transitions, report } = buildTransitions(store.trajectories({}), {
      reward: policy,
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({}),
    });
    assert.deepEqual(
      {
        rollouts: report.rollouts,
        exported: report.exported,
        transitions: report.transitions,
        excludedNoReward: report.excludedNoReward,
      },
      { rollouts: 3, exported: 2, transitions: 4, excludedNoReward: 1 },
    );
    for (const tr of transitions) assert.deepEqual(Transition.parse(tr), tr);
    // Rewards 1 and 0: mean 0.5, sample std √0.5, so ±0.5 / (√0.5 + 1e-4).
    const a = 0.5 / (Math.sqrt(0.5) + 1e-4);
    assert.deepEqual(
      transitions.map((tr) => [tr.step, tr.reward, Math.round(tr.advantage * 1e9) / 1e9]),
      [
        [0, 1, a],
        [1, 1, a],
        [0, 0, -a],
        [1, 0, -a],
      ].map(([s, r, v]) => [s, r, Math.round(v! * 1e9) / 1e9]),
    );
    assert.ok(
      transitions.every((tr) => typeof tr.reward === 'number'),
      'every exported sample has a reward',
    );
    const first = transitions[0]!;
    assert.deepEqual(
      [first.promptTokenIds, first.responseTokenIds, first.lossMask, first.needsTokenization],
      [[1, 2], [3, 4, 5], [1, 1, 1], false],
    );
    assert.equal(transitions[1]!.needsTokenization, true);
    assert.equal(transitions[1]!.response.text, '4');
    const chat = toChatExample(first);
    assert.ok('example' in chat, JSON.stringify(chat));
    const { example } = chat;
    assert.deepEqual(
      example.messages.map((m) => (m as { role: string }).role),
      ['user', 'assistant'],
    );
    assert.equal((example.messages[1] as { tool_calls: unknown[] }).tool_calls.length, 1);
    assert.equal(example.tools!.length, 1);

    const best = buildTransitions(store.trajectories({}), {
      reward: policy,
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({}),
      minReward: 1,
    });
    assert.deepEqual(
      [best.report.exported, best.report.excludedBelowMinReward, best.report.singletonGroups],
      [1, 1, 0],
    );
    assert.ok(
      best.transitions.every((tr) => Math.abs(tr.advantage - a) < 1e-9),
      'advantages come from the whole group, before --min-reward filters',
    );
  });

  test('a retried rollout trains on its last attempt only; tasks group within their dataset', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const retried = store.createRollout(
      parsed('createRollout', { maxAttempts: 2, task: { id: 'task-1', input: null }, datasetId: 'ds-a' }),
    ).id;
    store.transitionRollout(parsed('transitionRollout', { id: retried, to: 'running' }));
    store.addSpans({ rolloutId: retried, spans: [llmSpan(), llmSpan()] });
    store.transitionRollout(parsed('transitionRollout', { id: retried, to: 'failed' }));
    store.transitionRollout(parsed('transitionRollout', { id: retried, to: 'queued' }));
    store.transitionRollout(parsed('transitionRollout', { id: retried, to: 'running' }));
    const last = llmSpan();
    store.addSpans({ rolloutId: retried, spans: [last] });
    store.transitionRollout(parsed('transitionRollout', { id: retried, to: 'succeeded' }));
    store.addReward(parsed('addReward', { rolloutId: retried, value: 1, source: 'agent' }));
    const other = store.createRollout(
      parsed('createRollout', { task: { id: 'task-1', input: null }, datasetId: 'ds-b' }),
    ).id;
    store.addSpans({ rolloutId: other, spans: [llmSpan()] });
    store.addReward(parsed('addReward', { rolloutId: other, value: 0, source: 'agent' }));
    const { transitions, report } = buildTransitions(store.trajectories({}), {
      reward: policy,
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({}),
    });
    assert.deepEqual(
      transitions.filter((tr) => tr.rolloutId === retried).map((tr) => tr.spanId),
      [last.spanId],
    );
    assert.equal(report.singletonGroups, 2, 'task-1 of dataset a and task-1 of dataset b are different tasks');
    assert.ok(transitions.every((tr) => tr.advantage === 0));
  });

  test("an agent's reward posted in an attempt that then failed is not the retry's: training and the list read the last attempt's", (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const { id } = store.createRollout(
      parsed('createRollout', { maxAttempts: 2, task: { id: 'task-1', input: null } }),
    );
    const agentReward = (value: number, attempt: number) =>
      store.addReward(parsed('addReward', { rolloutId: id, value, source: 'agent' }), attempt);
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    store.addSpans({ rolloutId: id, spans: [llmSpan()] });
    agentReward(1, 1);
    store.transitionRollout(parsed('transitionRollout', { id, to: 'failed', error: 'crashed after its reward' }));
    store.transitionRollout(parsed('transitionRollout', { id, to: 'queued' }));
    assert.throws(() => agentReward(1, 1), /attempt 1 has ended \(its retry is queued\)/);
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    assert.throws(() => agentReward(1, 1), /attempt 1 has ended \(attempt 2 runs\)/);
    const last = llmSpan();
    store.addSpans({ rolloutId: id, spans: [last] });
    store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }));
    // Not rated by attempt 1's reward: unrated for `score --unrated`, the review and the status bar's count.
    assert.deepEqual(
      store.listRollouts(parsed('listRollouts', { unrated: true })).items.map((r) => r.id),
      [id],
    );
    assert.equal(store.stats().unrated, 1);
    store.addReward(parsed('addReward', { rolloutId: id, value: 0.25, source: 'rule' }));
    assert.equal(store.stats().unrated, 0);
    const [trajectory] = store.trajectoriesOf([id]);
    assert.deepEqual(
      trajectory!.rewards.map((reward) => [reward.source, reward.value]),
      [['rule', 0.25]],
      "attempt 1's reward is not this trajectory's",
    );
    assert.equal(episodeReward(trajectory!.rewards, policy), 0.25);
    assert.equal(store.getRollout(id).reward, 0.25, "the list's reward column is the same");
    assert.equal(store.listRewards(id).length, 2, 'both rewards stay in the history');
    const { transitions } = buildTransitions([trajectory!], {
      reward: policy,
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({ kind: 'none' }),
    });
    assert.deepEqual(
      transitions.map((tr) => [tr.spanId, tr.reward]),
      [[last.spanId, 0.25]],
    );
  });

  test('only whole answers become transitions (what GRPO batches and exports read); --include-failed keeps the rest, flagged', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const { id } = store.createRollout(parsed('createRollout', { task: { id: 'task-1', input: null } }));
    const failed = llmSpan({
      statusCode: 'error',
      attributes: { 'lightning.outcome': 'upstream_error', 'http.response.status_code': 500 },
    });
    const cancelled = llmSpan({ statusCode: 'error', attributes: { 'lightning.outcome': 'cancelled' } });
    const truncated = llmSpan({
      attributes: { 'lightning.outcome': 'truncated', 'lightning.truncated_by': 'stream_content' },
    });
    const whole = llmSpan({ attributes: { 'lightning.outcome': 'ok', 'lightning.retry_of': failed.spanId } });
    store.addSpans({ rolloutId: id, spans: [failed, whole, cancelled, truncated] });
    store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' }));
    const options = {
      reward: RewardPolicy.parse({ missing: 'fill' }),
      credit: { kind: 'identical' } as const,
      advantage: AdvantageOptions.parse({ kind: 'grpo' }),
    };
    const { transitions, report } = buildTransitions(store.trajectories({}), options);
    assert.deepEqual(
      transitions.map((tr) => [tr.spanId, tr.step, tr.outcome]),
      [[whole.spanId, 0, undefined]],
    );
    assert.deepEqual(report.skipped, { upstreamError: 1, cancelled: 1, truncated: 1 });
    const all = buildTransitions(store.trajectories({}), { ...options, includeFailed: true });
    assert.deepEqual(
      all.transitions.map((tr) => tr.outcome?.kind ?? 'ok'),
      ['upstream_error', 'ok', 'cancelled', 'truncated'],
    );
    for (const tr of all.transitions) assert.deepEqual(Transition.parse(tr), tr);
    assert.deepEqual(all.report.skipped, { upstreamError: 0, cancelled: 0, truncated: 0 });
    // These records hold no chat messages: each transition row says so, with the reason its chat row gives.
    for (const tr of all.transitions) {
      assert.match(tr.notChat ?? '', /the call records no chat messages/);
      assert.deepEqual(toChatExample(tr), { reason: tr.notChat });
    }
  });

  test('a record made before calls carried their outcome: an error whose message says cancelled is counted cancelled', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const { id } = store.createRollout(parsed('createRollout', {}));
    const legacy = llmSpan({ statusCode: 'error', statusMessage: 'cancelled: the client disconnected mid-stream' });
    store.addSpans({ rolloutId: id, spans: [legacy, llmSpan()] });
    store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' }));
    const { report } = buildTransitions(store.trajectories({}), {
      reward: policy,
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({ kind: 'none' }),
    });
    assert.deepEqual(report.skipped, { upstreamError: 0, cancelled: 1, truncated: 0 });
  });

  test('a rollout whose only call failed still counts in its task group; skipped calls count for exported rollouts only', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const rolloutOf = (value: number, span: SpanInput): string => {
      const { id } = store.createRollout(parsed('createRollout', { task: { id: 'task-1', input: null } }));
      store.addSpans({ rolloutId: id, spans: [span] });
      store.addReward(parsed('addReward', { rolloutId: id, value, source: 'agent' }));
      return id;
    };
    const good = rolloutOf(1, llmSpan({ attributes: { 'lightning.outcome': 'ok', 'gen_ai.agent.name': 'coder' } }));
    // Its agent's only call was refused (429): no row of its own, but it is a sample of the task, rewarded 0.
    rolloutOf(
      0,
      llmSpan({
        statusCode: 'error',
        attributes: {
          'lightning.outcome': 'upstream_error',
          'http.response.status_code': 429,
          'gen_ai.agent.name': 'coder',
        },
      }),
    );
    const options = {
      reward: policy,
      credit: { kind: 'identical' } as const,
      advantage: AdvantageOptions.parse({ kind: 'grpo' }),
    };
    const { transitions, report } = buildTransitions(store.trajectories({}), options);
    assert.deepEqual(
      transitions.map((tr) => tr.rolloutId),
      [good],
    );
    // A group of two, rewards 1 and 0: (1 − 0.5) / (std √0.5 + 1e-4), as with --include-failed.
    const expected = 0.5 / (Math.sqrt(0.5) + 1e-4);
    assert.ok(Math.abs(transitions[0]!.advantage - expected) < 1e-9, `advantage ${transitions[0]!.advantage}`);
    assert.equal(report.singletonGroups, 0);
    assert.deepEqual(report.skipped, { upstreamError: 1, cancelled: 0, truncated: 0 });
    const all = buildTransitions(store.trajectories({}), { ...options, includeFailed: true });
    assert.equal(all.transitions.find((tr) => tr.rolloutId === good)!.advantage, transitions[0]!.advantage);
    // Below --min-reward the failed rollout is not exported at all: --include-failed would not keep its call.
    const best = buildTransitions(store.trajectories({}), { ...options, minReward: 0.5 });
    assert.deepEqual(best.report.skipped, { upstreamError: 0, cancelled: 0, truncated: 0 });
    assert.equal(best.report.excludedBelowMinReward, 1);
    assert.equal(best.transitions[0]!.advantage, transitions[0]!.advantage, 'the group is the same');
    // A rollout with no call of the agents trained is no sample of theirs: not in their group.
    const { id: other } = store.createRollout(parsed('createRollout', { task: { id: 'task-1', input: null } }));
    store.addSpans({ rolloutId: other, spans: [llmSpan({ attributes: { 'gen_ai.agent.name': 'planner' } })] });
    store.addReward(parsed('addReward', { rolloutId: other, value: 0, source: 'agent' }));
    const coder = buildTransitions(store.trajectories({}), { ...options, agentMatch: /^coder$/ });
    assert.equal(coder.report.excludedNoCalls, 2, "the planner's rollout, and the one whose only call failed");
    assert.equal(
      coder.transitions.find((tr) => tr.rolloutId === good)!.advantage,
      transitions[0]!.advantage,
      "the planner's rollout does not join the group",
    );
  });
});

describe('LightningRL: trajectory aggregation', () => {
  const sample = (spanId: string, prompt: number[] | null, response: number[] | null, step: number): Transition => ({
    rolloutId: 'r',
    taskId: 't',
    step,
    spanId,
    spanIds: [spanId],
    agentName: null,
    model: 'm',
    api: 'chat.completions',
    prompt: { messages: null, input: null, tools: null },
    response: { message: null, output: null, text: `answer ${step}` },
    promptTokenIds: prompt,
    responseTokenIds: response,
    needsTokenization: prompt === null,
    logprobs: response ? response.map(() => -0.5) : null,
    lossMask: response ? response.map(() => 1) : null,
    episodeReward: 1,
    reward: 1,
    advantage: 0.5,
  });

  test('a joined sequence is cut at the token cap when any of its replies was (each reply is trained)', () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    const capped = { ...sample('a', [1, 2], [3, 4], 0), stoppedAtTokenCap: true as const };
    const [joined] = aggregateRollout([capped, sample('b', [1, 2, 3, 4, 9], [5], 1)], stats);
    assert.deepEqual([joined!.spanIds, joined!.stoppedAtTokenCap], [['a', 'b'], true]);
    const [whole] = aggregateRollout([sample('a', [1, 2], [3, 4], 0), sample('b', [1, 2, 3, 4, 9], [5], 1)], stats);
    assert.equal('stoppedAtTokenCap' in whole!, false);
  });

  test('a prompt that extends the previous prompt + response joins it; environment tokens are masked; mismatches and missing ids are counted', () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    const out = aggregateRollout(
      [
        sample('a', [1, 2], [3, 4], 0),
        sample('b', [1, 2, 3, 4, 9, 9], [5], 1),
        sample('c', [1, 2, 3, 4, 9, 9, 5, 8], [6, 7], 2),
        sample('d', [1, 2, 7], [8], 3),
        sample('e', null, null, 4),
      ],
      stats,
    );
    assert.deepEqual(
      out.map((s) => s.spanIds),
      [['a', 'b', 'c'], ['d'], ['e']],
    );
    const [joined] = out;
    assert.deepEqual(joined!.promptTokenIds, [1, 2]);
    assert.deepEqual(joined!.responseTokenIds, [3, 4, 9, 9, 5, 8, 6, 7]);
    assert.deepEqual(joined!.lossMask, [1, 1, 0, 0, 1, 0, 1, 1]);
    assert.deepEqual(joined!.logprobs, [-0.5, -0.5, 0, 0, -0.5, 0, -0.5, -0.5]);
    assert.equal(joined!.response.text, 'answer 2', 'the sample ends with the last call');
    for (const s of out)
      if (s.lossMask) assert.equal(s.lossMask.length, s.responseTokenIds!.length, 'masks align with tokens');
    for (const s of out) assert.deepEqual(Transition.parse(s), s);
    assert.deepEqual(stats, { merged: 1, mismatches: 1, withoutTokenIds: 1, notWhole: 0, advantageDiffers: 0 });
  });

  test('a call that was not a whole answer (--include-failed) is never joined: it keeps its own row and flag', () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    // A whole answer, then a stream cut by the limit whose prompt extends it, then a whole answer extending both.
    const cut: Transition = {
      ...sample('b', [1, 2, 3, 4, 9], [5, 5], 1),
      outcome: { kind: 'truncated', limit: 'stream_content' },
    };
    const out = aggregateRollout(
      [sample('a', [1, 2], [3, 4], 0), cut, sample('c', [1, 2, 3, 4, 9, 5, 5, 8], [6], 2)],
      stats,
    );
    assert.deepEqual(
      out.map((s) => [s.spanIds, s.outcome?.kind ?? 'ok']),
      [
        [['a'], 'ok'],
        [['b'], 'truncated'],
        [['c'], 'ok'],
      ],
    );
    assert.deepEqual(out[1]!.lossMask, [1, 1], 'the cut response is its own sample, flagged');
    assert.deepEqual(stats, { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 1, advantageDiffers: 0 });
  });

  test("a joined sequence's chat row is the whole conversation: the earlier replies and tool results, then the last reply", () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    const question: Array<Record<string, Json>> = [
      { role: 'system', content: 'SYS' },
      { role: 'user', content: 'What is 2+2?' },
    ];
    const call = { id: 'call_1', type: 'function', function: { name: 'calc', arguments: '{"e":"2+2"}' } };
    const first: Transition = {
      ...sample('a', [1, 2], [3, 4], 0),
      prompt: { messages: question, input: null, tools: null },
      response: { message: { role: 'assistant', content: null, tool_calls: [call] }, output: null, text: '' },
    };
    const afterTool: Array<Record<string, Json>> = [
      ...question,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '4' },
    ];
    const second: Transition = {
      ...sample('b', [1, 2, 3, 4, 9], [5], 1),
      prompt: { messages: afterTool, input: null, tools: null },
      response: { message: { role: 'assistant', content: 'It is 4.' }, output: null, text: 'It is 4.' },
    };
    const [joined] = aggregateRollout([first, second], stats);
    assert.deepEqual(joined!.spanIds, ['a', 'b']);
    assert.deepEqual(joined!.promptTokenIds, [1, 2], 'the tokens still start at the first prompt');
    const row = toChatExample(joined!);
    assert.ok('example' in row);
    assert.deepEqual(row.example.messages, [...afterTool, { role: 'assistant', content: 'It is 4.' }]);
  });

  test('calls whose advantages differ are not joined (one sample, one advantage), and are counted', () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    const out = aggregateRollout(
      [
        { ...sample('a', [1, 2], [3, 4], 0), reward: 0.5, advantage: 0.5 },
        { ...sample('b', [1, 2, 3, 4, 9], [5], 1), reward: 1, advantage: 1 },
      ],
      stats,
    );
    assert.deepEqual(
      out.map((s) => [s.spanIds, s.reward, s.advantage]),
      [
        [['a'], 0.5, 0.5],
        [['b'], 1, 1],
      ],
    );
    assert.deepEqual(stats, { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 1 });
  });

  test('a joined sequence with a call without a chat form carries that reason', () => {
    const stats = { merged: 0, mismatches: 0, withoutTokenIds: 0, notWhole: 0, advantageDiffers: 0 };
    const noReply: Transition = { ...sample('b', [1, 2, 3, 4, 9], [5], 1), notChat: 'a response with no output items' };
    const [joined] = aggregateRollout([sample('a', [1, 2], [3, 4], 0), noReply], stats);
    assert.deepEqual(joined!.spanIds, ['a', 'b']);
    assert.equal(joined!.notChat, 'a response with no output items');
  });
});
