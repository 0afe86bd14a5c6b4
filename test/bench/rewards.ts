/**
 * Automatic rewards: rule scoring of 100,000 recorded rollouts end to end (select, load spans,
 * final answers, three rules, combined, 400,000 reward rows written) against reading the same
 * rollouts' final answers without scoring; and ONNX reward-model throughput on CPU at batch 1 and
 * 32 (the committed fixture model: a tiny classifier, so this measures the daemon's overhead per
 * rollout — tokenization, tensors, onnxruntime calls — more than the model).
 */
import fs from 'node:fs';
import path from 'node:path';
import { ScoreRolloutsParams } from '../../trainer-daemon/protocol';
import { scoreRollouts } from '../../trainer-daemon/rewards/job';
import { RewardModel } from '../../trainer-daemon/rewards/rewardModel';
import { Tokenizer } from '../../trainer-daemon/rewards/tokenizer';
import { toScoringTrajectory } from '../../trainer-daemon/rewards/trajectory';
import { Store } from '../../trainer-daemon/store/store';
import { recordRollout } from '../helpers/rewards';
import { fmt, rows } from './table';

const ROLLOUTS = 100_000;
const TASKS = 1_000;
const MODEL = path.join(__dirname, '..', 'fixtures', 'reward-model');

function seed(store: Store): void {
  const datasetId = store.importDataset({
    name: 'arith',
    tasks: Array.from({ length: TASKS }, (_, i) => ({ id: `t${i}`, split: 'train' as const, input: `${i} + ${i}`, expected: 2 * i })),
  }).id;
  store.runGrouped([
    () => {
      for (let r = 0; r < ROLLOUTS; r += 1) {
        const task = r % TASKS;
        const answer = r % 3 === 0 ? `The answer is ${2 * task + 1}.` : `The answer is ${2 * task}.`;
        recordRollout(store, { answer, tools: r % 2 ? ['calc'] : [], task: { id: `t${task}`, input: `${task} + ${task}` }, datasetId });
      }
    },
  ]);
}

async function ruleScoring(work: string): Promise<void> {
  const store = Store.open(path.join(work, 'rewards', 'store.db'));
  try {
    seed(store);
    let started = performance.now();
    let answers = 0;
    for (const trajectory of store.trajectories({ status: ['succeeded', 'failed', 'timeout'] })) {
      if (toScoringTrajectory(trajectory).finalAnswer !== null) answers += 1;
    }
    const baselineMs = performance.now() - started;
    const spec = {
      sources: [
        { type: 'rule', rule: { rule: 'numeric' } },
        { type: 'rule', weight: 0.1, rule: { rule: 'tool-called', tool: 'calc' } },
        { type: 'rule', rule: { rule: 'steps-penalty', max: 5 } },
      ],
    };
    started = performance.now();
    const result = await scoreRollouts({ store }, ScoreRolloutsParams.parse({ spec }));
    const ms = performance.now() - started;
    if (result.scored !== ROLLOUTS || answers !== ROLLOUTS) throw new Error(`rule bench: scored ${result.scored}, answers ${answers}`);
    const rate = ROLLOUTS / (ms / 1000);
    rows.push({
      metric: `rule scoring, ${fmt(ROLLOUTS)} rollouts × 3 rules + combined (${fmt(store.stats().rewards)} reward rows written)`,
      result: `${fmt(ms)} ms (${fmt(rate)} rollouts/s)`,
      baseline: `${fmt(baselineMs)} ms (read the same rollouts' final answers, no scoring)`,
      ratio: `${fmt(ms / baselineMs, 2)}×`,
      // The issue names no target: most of the cost is the four reward rows written per rollout.
      target: 'reported',
      met: '-',
    });
  } finally {
    store.close();
  }
}

async function onnxThroughput(): Promise<void> {
  const model = await RewardModel.load(path.join(MODEL, 'model.onnx'), path.join(MODEL, 'tokenizer.json'), { device: 'cpu' });
  const tokenizer = Tokenizer.load(path.join(MODEL, 'tokenizer.json'));
  // Task + answer texts of 40–60 characters, as the default template makes them.
  const texts = Array.from({ length: 2_048 }, (_, i) => `q: what is ${i} + ${i}?\nthe answer is ${2 * i}${'.'.repeat(i % 20)}`);
  try {
    let started = performance.now();
    let tokens = 0;
    for (const text of texts) tokens += tokenizer.encode(text).ids.length;
    const tokenizeRate = texts.length / ((performance.now() - started) / 1000);
    const rates = new Map<number, number>();
    for (const batch of [1, 32]) {
      await model.score(texts.slice(0, 64), batch);
      started = performance.now();
      await model.score(texts, batch);
      rates.set(batch, texts.length / ((performance.now() - started) / 1000));
    }
    rows.push({
      metric: `ONNX reward model on CPU, batch 1 (${fmt(texts.length)} rollouts, ${fmt(tokens / texts.length)} tokens each)`,
      result: `${fmt(rates.get(1)!)} rollouts/s`,
      baseline: `${fmt(tokenizeRate)} rollouts/s (tokenizing only)`,
      ratio: `${fmt(rates.get(1)! / tokenizeRate, 2)}×`,
      target: 'reported',
      met: '-',
    });
    rows.push({
      metric: 'ONNX reward model on CPU, batch 32 (same rollouts)',
      result: `${fmt(rates.get(32)!)} rollouts/s`,
      baseline: `${fmt(rates.get(1)!)} rollouts/s (batch 1)`,
      ratio: `${fmt(rates.get(32)! / rates.get(1)!, 2)}×`,
      target: 'batch 32 > batch 1',
      met: rates.get(32)! > rates.get(1)! ? 'yes' : 'NO',
    });
  } finally {
    await model.dispose();
  }
}

export async function rewardsBenchmark(work: string): Promise<void> {
  fs.mkdirSync(path.join(work, 'rewards'), { recursive: true });
  await ruleScoring(work);
  await onnxThroughput();
}
