/** Training records in the store, the transitions handed to the worker, demonstrations, the chart. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import {
  TrainingRunDetail,
  metricPoints,
  type Trajectory,
  type Transition,
  checkpointsOf,
} from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { renderChart, renderCurvesSvg } from '../../trainer-daemon/training/chartFile';
import { readDemonstrations } from '../../trainer-daemon/training/grpo';
import {
  drGrpoMaxResponseLength,
  grpoAdvantageOptions,
  klSampled,
  requestedMaxTokens,
  policyUpdate,
  toWorkerTransitions,
  workerTrainParams,
  stepSeed,
} from '../../trainer-daemon/training/grpoUpdate';
import { chatToSftExample, heldOutRollouts } from '../../trainer-daemon/training/sftRows';
import { fsdpTorchProblem } from '../../trainer-daemon/training/doctor';
import { randomToolDemonstrations, toolsTasks } from '../../trainer-daemon/demo/tasks';
import { tempDir } from '../helpers/tmp';
import { testGrpoConfig } from '../helpers/trainingConfigs';
import { grpoConfigFromFlags } from '../../trainer-daemon/cli/commands/trainGrpo';
import { updateMetrics } from '../../trainer-daemon/training/grpoPolicies';

test('training runs: status transitions, metric series, latest values, checkpoints, policy versions', (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const changed: string[] = [];
  store.onDidChangeTrainingRun(({ id }) => changed.push(id));
  const run = store.recordTrainingRun({ algorithm: 'grpo', config: testGrpoConfig({ lr: 0.001 }) });
  assert.equal(run.algorithm === 'grpo' && run.config.lr, 0.001, 'the config reads back typed');
  assert.equal(run.status, 'queued');
  assert.throws(() => store.setTrainingRunStatus(run.id, 'succeeded'), /is queued and cannot become succeeded/);
  store.setTrainingRunStatus(run.id, 'running');
  store.recordTrainingStep(run.id, 1, { 'reward/mean': 0.25, loss: 0.5, skipped: Number.NaN });
  store.recordTrainingStep(run.id, 2, { 'reward/mean': 0.5 }, { dir: '/ckpt/2', metrics: { 'reward/mean': 0.5 } });
  assert.equal(store.addPolicyVersion({ runId: run.id, step: 0, checkpoint: null }), 1);
  assert.equal(store.addPolicyVersion({ runId: run.id, step: 2, checkpoint: '/ckpt/2' }), 2);
  assert.deepEqual(store.agentResources(null).resources.policy, {
    version: 2,
    kind: 'checkpoint',
    value: { runId: run.id, step: 2, checkpoint: '/ckpt/2' },
  });

  const detail = TrainingRunDetail.parse(store.getTrainingRun(run.id));
  assert.deepEqual(
    metricPoints(detail.metrics, 'reward/mean').map((p) => [p.step, p.value]),
    [
      [1, 0.25],
      [2, 0.5],
    ],
  );
  assert.deepEqual(metricPoints(detail.metrics, 'skipped'), [], 'non-finite values are not stored');
  assert.deepEqual([detail.run.step, detail.run.latest], [2, { 'reward/mean': 0.5, loss: 0.5 }]);
  assert.deepEqual(
    store.getTrainingRun(run.id, 1).metrics.map((p) => [p.step, p.name]),
    [[2, 'reward/mean']],
  );
  assert.deepEqual(
    checkpointsOf(detail).map((c) => [c.step, c.path]),
    [[2, '/ckpt/2']],
  );
  store.setTrainingRunStatus(run.id, 'cancelled', { error: 'cancelled' });
  // Resume: cancelled → running again.
  assert.equal(store.setTrainingRunStatus(run.id, 'running').status, 'running');
  assert.ok(changed.length >= 5 && changed.every((id) => id === run.id));
  assert.throws(() => store.trainingRun('train-nope'), /training run train-nope does not exist/);
});

function transition(overrides: Partial<Transition>): Transition {
  return {
    rolloutId: 'r',
    taskId: 't',
    step: 0,
    spanId: 's',
    spanIds: ['s'],
    agentName: null,
    model: null,
    api: 'chat.completions',
    prompt: { messages: null, input: null, tools: null },
    response: { message: null, output: null, text: null },
    promptTokenIds: [1, 2],
    responseTokenIds: [3, 4],
    needsTokenization: false,
    logprobs: [-0.1, -0.2],
    lossMask: [1, 1],
    episodeReward: 1,
    reward: 1,
    advantage: 0.5,
    ...overrides,
  };
}

test('the worker gets transitions with exact token ids; those with advantage 0 too, unless zeroAdvantage is drop', () => {
  const given = [
    transition({}),
    transition({ advantage: 0 }),
    transition({ promptTokenIds: null, needsTokenization: true }),
    transition({ logprobs: [-0.1], lossMask: [0, 1] }),
  ];
  const kept = { promptIds: [1, 2], responseIds: [3, 4], logprobs: [-0.1, -0.2], advantage: 0.5, mask: [1, 1] };
  // Logprobs that do not cover the response are recomputed by the worker (null).
  const recomputed = { promptIds: [1, 2], responseIds: [3, 4], logprobs: null, advantage: 0.5, mask: [0, 1] };
  // As TRL's GRPOTrainer: a zero-advantage row stays (it counts in the normaliser; KL and entropy act on it).
  assert.deepEqual(toWorkerTransitions(given), [kept, { ...kept, advantage: 0 }, recomputed]);
  assert.deepEqual(toWorkerTransitions(given, 'drop'), [kept, recomputed]);
  // A call with no token ids (a model other than the policy answered it) is counted, and its max_tokens is not the
  // update's (dr_grpo's divisor).
  const hosted = transition({
    spanIds: ['hosted'],
    promptTokenIds: null,
    responseTokenIds: null,
    needsTokenization: true,
  });
  const update = policyUpdate(
    [transition({ spanIds: ['own'] }), hosted],
    'keep',
    new Map([
      ['own', 64],
      ['hosted', 4096],
    ]),
  );
  assert.deepEqual([update.trainable, update.requestedCaps, update.noTokenIds], [[kept], [64], 1]);
});

test('demonstrations: chat examples become (prompt, completion) pairs; the demo shows every tool for every question', (t) => {
  const tasks = toolsTasks(30, 6);
  assert.deepEqual(
    [tasks.filter((x) => x.split === 'train').length, tasks.filter((x) => x.split === 'val').length],
    [30, 6],
  );
  const file = path.join(tempDir(t), 'demos.jsonl');
  fs.writeFileSync(file, randomToolDemonstrations(tasks.slice(0, 30), 0));
  const examples = readDemonstrations(file);
  assert.equal(examples.length, 30 * 3 * 2, 'per task: a call and an answer for each of the three tools');
  const toolName = (example: (typeof examples)[number]): string =>
    (example.completion.tool_calls![0] as { function: { name: string } }).function.name;
  const perTask = tasks
    .slice(0, 30)
    .map((task, i) => ({ task, calls: examples.slice(i * 6, i * 6 + 6).filter((e) => e.completion.tool_calls) }));
  for (const { task, calls } of perTask) {
    assert.ok(
      calls.every((call) => call.messages[0]!.content === (task.input as { question: string }).question),
      "a task's examples are its question",
    );
    assert.deepEqual(
      calls.map(toolName).sort(),
      ['add', 'multiply', 'subtract'],
      `every tool once for task ${task.id}: the demonstrations say nothing about which fits`,
    );
  }
  assert.equal(
    new Set(perTask.map(({ calls }) => toolName(calls[0]!))).size,
    3,
    'the order of the tools varies by task',
  );
  const answer = examples[1]!;
  assert.deepEqual(
    answer.messages.map((m) => m.role),
    ['user', 'assistant', 'tool'],
  );
  assert.equal(answer.completion.content, answer.messages[2]!.content, 'the answer repeats the tool result');
  fs.writeFileSync(file, '{"messages":[{"role":"user","content":"hi"}]}\n');
  assert.throws(() => readDemonstrations(file), /demos\.jsonl:1: the last message must be the assistant's/);
  fs.writeFileSync(
    file,
    '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}\n{"messages": [\n',
  );
  assert.throws(() => readDemonstrations(file), /demos\.jsonl:2: not a JSON object/, 'a bad line is named');
});

test('the chart is one self-contained HTML file with the reward curves', () => {
  const html = renderChart({
    algorithm: 'grpo',
    run: {
      id: 'train-1',
      algorithm: 'grpo',
      config: testGrpoConfig(),
      status: 'succeeded',
      createdAt: 0,
      startedAt: 0,
      endedAt: 1,
      error: null,
      errorKind: null,
      cancelRequested: false,
      result: null,
      step: 2,
      latest: {},
    },
    metrics: [
      { step: 0, name: 'val/reward', value: 0.1, timeMs: 0 },
      { step: 1, name: 'loss', value: -0.1, timeMs: 0 },
      { step: 1, name: 'reward/mean', value: 0.2, timeMs: 0 },
      { step: 2, name: 'reward/mean', value: 0.6, timeMs: 0 },
    ],
    checkpoints: [],
  });
  assert.match(html, /^<!doctype html>/);
  assert.doesNotMatch(html, /<script|https?:\/\//);
  assert.equal((html.match(/<polyline/g) ?? []).length, 3);
  // The panel's small multiples: each chart's summary is its accessible name and its caption.
  assert.match(html, /aria-label="Reward \(sampled, ± std\): 0\.2 → 0\.6 \(iterations 1–2\)"/);
  assert.match(html, /<p>Validation reward: 0\.1 at iteration 0<\/p>/);
});

test('the learning bench chart is one standalone SVG with a curve and a legend entry per series, colours fixed', () => {
  const svg = renderCurvesSvg(
    [
      { step: 0, name: 'seed 0: validation (greedy)', value: 0.3 },
      { step: 10, name: 'seed 0: validation (greedy)', value: 0.9 },
      { step: 1, name: 'seed 0: sampled', value: 0.2 },
      { step: 10, name: 'seed 0: sampled', value: 0.7 },
    ],
    'reward <by> iteration',
  );
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.doesNotMatch(svg, /<div|<script/, 'no HTML inside: it is shown as an image');
  assert.equal((svg.match(/<polyline/g) ?? []).length, 2);
  assert.match(svg, /<text[^>]*>seed 0: validation \(greedy\)<\/text>/);
  assert.match(svg, /<text[^>]*>seed 0: sampled<\/text>/);
  assert.match(svg, /reward &lt;by&gt; iteration/, 'the title is escaped');
  assert.match(svg, /--vscode-charts-blue:#1f77b4/, 'the theme variables have fixed values outside the editor');
});

test('GRPO flags: loss types, clip-higher and reward scaling reach the config, named as TRL names them; bad ones name the flag', () => {
  const config = grpoConfigFromFlags(
    {
      store: 'store.db',
      algorithm: 'grpo',
      model: 'tiny',
      dataset: 'd',
      lossType: 'dr_grpo',
      clip: '0.2',
      clipHigh: '0.28',
      scaleRewards: 'none',
      klCoef: '0.05',
    },
    ['node', 'agent.js'],
    '/tmp',
  );
  assert.equal(config.lossType, 'dr_grpo');
  assert.equal(config.clip, 0.2);
  assert.equal(config.clipHigh, 0.28);
  assert.equal(config.scaleRewards, 'none');
  assert.equal(config.klCoef, 0.05);
  const defaults = grpoConfigFromFlags(
    { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd' },
    ['node', 'agent.js'],
    '/tmp',
  );
  // TRL 1.13's GRPOConfig defaults: loss_type dapo, scale_rewards group, use_bias_correction_kl True; zero-advantage
  // rows kept.
  assert.deepEqual(
    [defaults.lossType, defaults.clipHigh, defaults.scaleRewards, defaults.klBiasCorrection, defaults.zeroAdvantage],
    ['dapo', null, 'group', true, 'keep'],
  );
  const chosen = grpoConfigFromFlags(
    {
      store: 'store.db',
      algorithm: 'grpo',
      model: 'tiny',
      dataset: 'd',
      klBiasCorrection: false,
      zeroAdvantage: 'drop',
    },
    ['x'],
    '/tmp',
  );
  assert.deepEqual([chosen.klBiasCorrection, chosen.zeroAdvantage], [false, 'drop']);
  assert.equal(
    grpoConfigFromFlags(
      { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', klBiasCorrection: true },
      ['x'],
      '/tmp',
    ).klBiasCorrection,
    true,
  );
  // A flag of --warm-start (or --ray) without it is a flag left out, not ignored; a timeout past a week is refused.
  const refused: Array<[Record<string, string>, RegExp]> = [
    [{ rayPython: 'python3' }, /--ray-python applies with --ray only/],
    [{ rayWorkingDir: '/tmp' }, /--ray-working-dir applies with --ray only/],
    [{ timeout: '99999999999' }, /--timeout 99999999999: at most 604800 seconds/],
    [{ warmStartSteps: '5' }, /--warm-start-steps applies with --warm-start FILE only/],
    [{ warmStartUntil: '0.5' }, /--warm-start-until applies with --warm-start FILE only/],
  ];
  for (const [flags, message] of refused)
    assert.throws(
      () =>
        grpoConfigFromFlags(
          { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', ...flags },
          ['x'],
          '/tmp',
        ),
      message,
    );
  assert.throws(
    () =>
      grpoConfigFromFlags(
        { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', zeroAdvantage: 'skip' as never },
        ['x'],
        '/tmp',
      ),
    /--zero-advantage/,
  );
  assert.throws(
    () =>
      grpoConfigFromFlags(
        { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', clipHigh: '-1' },
        ['x'],
        '/tmp',
      ),
    /--clip-high/,
  );
  assert.throws(
    () =>
      grpoConfigFromFlags(
        { store: 'store.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', lossType: 'ppo' as never },
        ['x'],
        '/tmp',
      ),
    /--loss-type/,
  );
});

test('klCoef 0: the KL is measured on the first, validated and last updates only; with a KL term, on every one', () => {
  const rows = [{ promptIds: [1], responseIds: [1, 2, 3], logprobs: null, advantage: 1 }];
  const config = testGrpoConfig({ iterations: 12, evalEvery: 5 });
  const measured = Array.from({ length: 12 }, (_, i) => i + 1).filter((step) => klSampled(config, step));
  assert.deepEqual(measured, [1, 5, 10, 12]);
  assert.equal(workerTrainParams(config, rows, [], 2).klSample, false, 'an update in between skips the reference');
  assert.equal('klSample' in workerTrainParams(config, rows, [], 5), false, 'the worker measures by default');
  assert.equal('klSample' in workerTrainParams(config, rows), false);
  // Each iteration's minibatches are drawn anew: its seed differs from the last iteration's.
  assert.notEqual(workerTrainParams(config, rows, [], 2).seed, workerTrainParams(config, rows, [], 3).seed);
  assert.equal(workerTrainParams(config, rows, [], 2).seed, workerTrainParams(config, rows, [], 2).seed);
  assert.equal(stepSeed(1, 2), 100_005, 'seed × 100003 + step for the seeds people type');
  for (const seed of [Number.MAX_SAFE_INTEGER, 2 ** 40, -(2 ** 45)]) {
    const derived = stepSeed(seed, 7);
    assert.ok(Number.isSafeInteger(derived) && Math.abs(derived) < 2 ** 31, `--seed ${seed}: ${derived}`);
  }
  const penalised = testGrpoConfig({ iterations: 12, evalEvery: 5, klCoef: 0.04 });
  assert.ok(Array.from({ length: 12 }, (_, i) => i + 1).every((step) => klSampled(penalised, step)));
  // An update that did not measure it records no KL (never a 0 it did not see).
  const result = {
    step: 2,
    loss: 0.1,
    pgLoss: 0.1,
    entropy: 2,
    clipFraction: 0,
    maxRatioDeviation: 0,
    tokens: 3,
    seconds: 1,
  };
  assert.equal('kl' in updateMetrics(result), false);
  assert.equal(updateMetrics({ ...result, kl: 0.002 }).kl, 0.002);
});

test("dr_grpo's divisor: the flag, else the largest max_tokens the calls asked for (at least the longest response); other loss types send none", () => {
  const rows = [{ promptIds: [1], responseIds: [1, 2, 3], logprobs: null, advantage: 1 }];
  const drGrpo = testGrpoConfig({ lossType: 'dr_grpo' });
  assert.equal(drGrpoMaxResponseLength(drGrpo, rows, [16, 64, 32]), 64, 'the generation cap, as TRL');
  assert.equal(drGrpoMaxResponseLength(drGrpo, rows, []), 3, 'no cap named: the longest response');
  assert.equal(drGrpoMaxResponseLength(drGrpo, rows, [2]), 3, 'never below the longest response');
  assert.equal(drGrpoMaxResponseLength({ ...drGrpo, maxResponseLength: 10 }, rows, [64]), 10, 'the flag wins');
  assert.equal(drGrpoMaxResponseLength(testGrpoConfig({}), rows, [64]), undefined, 'dapo does not read it');
  assert.equal(workerTrainParams(drGrpo, rows, [40]).maxResponseLength, 40, 'sent with the update');
  assert.equal('maxResponseLength' in workerTrainParams(testGrpoConfig({}), rows, [40]), false);
  // What the calls asked for, from the spans the proxy recorded.
  const span = (spanId: string, attributes: Record<string, unknown>) =>
    ({ spanId, attributes }) as unknown as Trajectory['spans'][number];
  const caps = requestedMaxTokens([
    {
      rollout: {} as Trajectory['rollout'],
      rewards: [],
      spans: [
        span('a', { 'gen_ai.request.max_tokens': 24 }),
        span('b', {}),
        span('c', { 'gen_ai.request.max_tokens': 'many' }),
      ],
    },
  ]);
  assert.deepEqual([...caps], [['a', 24]]);
  // The std estimator reaches the advantage options.
  assert.equal(grpoAdvantageOptions(testGrpoConfig({})).std, 'sample');
  assert.equal(grpoAdvantageOptions(testGrpoConfig({ std: 'population' })).std, 'population');
  assert.equal(
    grpoConfigFromFlags(
      { store: 's.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', std: 'population' },
      ['a'],
      '/',
    ).std,
    'population',
  );
  assert.throws(
    () =>
      grpoConfigFromFlags(
        { store: 's.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', maxResponseLength: '10' },
        ['a'],
        '/',
      ),
    /--max-response-length: only --loss-type dr_grpo reads it \(this run's loss type is dapo, the default\)/,
  );
  assert.equal(
    grpoConfigFromFlags(
      { store: 's.db', algorithm: 'grpo', model: 'tiny', dataset: 'd', lossType: 'dr_grpo', maxResponseLength: '128' },
      ['a'],
      '/',
    ).maxResponseLength,
    128,
  );
});

test('sft rows: the held-out rollouts are a stable share by seed and id, at least one and never all', () => {
  const ids = Array.from({ length: 40 }, (_, i) => `ro-${i}`);
  const held = heldOutRollouts(ids, 0.25, 7);
  assert.ok(held.size >= 4 && held.size <= 18, `about a quarter: ${held.size}`);
  assert.deepEqual(heldOutRollouts([...ids].reverse(), 0.25, 7), held, 'the order does not matter');
  const more = heldOutRollouts([...ids, 'ro-new-1', 'ro-new-2'], 0.25, 7);
  assert.ok(
    [...held].every((id) => more.has(id)),
    'a new rollout does not move the old ones across',
  );
  assert.notDeepEqual(heldOutRollouts(ids, 0.25, 8), held, 'another seed, another split');
  assert.equal(heldOutRollouts(ids, 0, 7).size, 0, '0: no validation');
  assert.equal(heldOutRollouts(['a'], 0.5, 7).size, 0, 'one rollout: it trains');
  assert.equal(heldOutRollouts(['a', 'b'], 0.01, 7).size, 1, 'at least one');
  assert.equal(heldOutRollouts(['a', 'b', 'a'], 0.5, 0).size, 1, 'never all');
});

test('sft rows: a resumed run keeps its split — a rollout the at-least-one or never-all rule placed stays put', () => {
  const sides = (held: Set<string>, ids: readonly string[]) => ({
    train: ids.filter((id) => !held.has(id)),
    val: ids.filter((id) => held.has(id)),
  });
  // No point below 0.1: the at-least-one rule held out one rollout. A new one falls below 0.1 by itself.
  const first = ['ro-b', 'ro-c', 'ro-d', 'ro-e'];
  const started = heldOutRollouts(first, 0.1, 0);
  assert.equal(started.size, 1);
  const fresh = heldOutRollouts([...first, 'ro-new-5'], 0.1, 0);
  assert.ok(
    [...fresh].some((id) => !started.has(id)) || fresh.size !== started.size,
    'drawn anew, the forced choice moves (the case this guards)',
  );
  const resumed = heldOutRollouts([...first, 'ro-new-5'], 0.1, 0, sides(started, first));
  assert.ok(
    [...started].every((id) => resumed.has(id)),
    'the first held-out rollout stays held out',
  );
  assert.ok(
    first.filter((id) => !started.has(id)).every((id) => !resumed.has(id)),
    'the first training rollouts stay in training',
  );
  // The never-all rule capped a two-rollout split at one; a third rollout does not pull the other into validation.
  const pair = ['a', 'b'];
  const capped = heldOutRollouts(pair, 0.99, 0);
  assert.equal(capped.size, 1);
  const later = heldOutRollouts([...pair, 'c'], 0.99, 0, sides(capped, pair));
  assert.deepEqual(
    pair.map((id) => later.has(id)),
    pair.map((id) => capped.has(id)),
  );
});

test('sft rows: a chat example becomes a demonstration; one with no reply is refused, naming where', () => {
  const tool = { type: 'function', function: { name: 'f', parameters: {} } };
  assert.deepEqual(
    chatToSftExample(
      {
        messages: [
          { role: 'user', content: 'q' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
          },
        ],
        tools: [tool],
      },
      'row 1',
    ),
    {
      messages: [{ role: 'user', content: 'q' }],
      tools: [tool],
      completion: { tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    },
  );
  assert.throws(
    () =>
      chatToSftExample(
        {
          messages: [
            { role: 'user', content: 'q' },
            { role: 'assistant', content: null, tool_calls: [] },
          ],
        },
        'row 2',
      ),
    /^InvalidInputError: row 2: the assistant's message has neither content nor tool_calls|row 2: the assistant's message has neither content nor tool_calls/,
  );
  assert.throws(
    () => chatToSftExample({ messages: [{ role: 'user', content: 'q' }] }, 'row 3'),
    /row 3: the last message must be the assistant's/,
  );
});

test('--fsdp needs torch 2.6: older ones are named with the fix, newer and local builds pass', () => {
  assert.equal(fsdpTorchProblem('2.6.0', '/p'), undefined);
  assert.equal(fsdpTorchProblem('2.13.0+cpu', '/p'), undefined);
  assert.equal(fsdpTorchProblem('3.0.0', '/p'), undefined);
  assert.match(
    fsdpTorchProblem('1.13.0a0', '/usr/bin/python3') ?? '',
    /^--fsdp needs torch 2\.6 or later .* \/usr\/bin\/python3 has torch 1\.13\.0a0: point --python at a Python with a newer torch .*or train without --fsdp/,
  );
  assert.match(fsdpTorchProblem('2.5.1+cu121', '/p') ?? '', /has torch 2\.5\.1\+cu121/);
});
