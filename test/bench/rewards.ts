/**
 * Automatic rewards: rule scoring of 100,000 recorded rollouts end to end (select, load spans,
 * final answers, three rules, combined, 400,000 reward rows written) against reading the same
 * rollouts' final answers without scoring; and ONNX reward-model throughput on CPU at batch 1 and
 * 32 (the committed fixture model: a tiny classifier, so this measures the daemon's overhead per
 * rollout — tokenization, tensors, onnxruntime calls — more than the model). And scoring as rollouts
 * finish (the dataset runner's, GRPO's and APO's path: a queue of small `rewards/score` calls) against
 * one job over the same rollouts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ScoreRolloutsParams, type MethodName, type ParamsOf } from '../../trainer-daemon/protocol';
import { scoreRollouts } from '../../trainer-daemon/rewards/job';
import { RewardModel } from '../../trainer-daemon/rewards/rewardModel';
import { Tokenizer } from '../../trainer-daemon/rewards/tokenizer';
import { createHandlers, invoke } from '../../trainer-daemon/rpc/handlers';
import { ScoringQueue } from '../../trainer-daemon/runner/scoring';
import { toScoringTrajectory } from '../../trainer-daemon/rewards/trajectory';
import { Store } from '../../trainer-daemon/store/store';
import { recordRollout } from '../helpers/rewards';
import { fmt, rows } from './table';
import { parsed } from '../helpers/params';

const ROLLOUTS = 100_000;
const TASKS = 1_000;
const MODEL = path.join(__dirname, '..', 'fixtures', 'reward-model');

function seed(store: Store, rollouts = ROLLOUTS): void {
  const datasetId = store.importDataset(
    parsed('importDataset', {
      name: 'arith',
      tasks: Array.from({ length: TASKS }, (_, i) => ({
        id: `t${i}`,
        split: 'train' as const,
        input: `${i} + ${i}`,
        expected: 2 * i,
      })),
    }),
  ).id;
  store.runGrouped([
    () => {
      for (let r = 0; r < rollouts; r += 1) {
        const task = r % TASKS;
        const answer = r % 3 === 0 ? `The answer is ${2 * task + 1}.` : `The answer is ${2 * task}.`;
        recordRollout(store, {
          answer,
          tools: r % 2 ? ['calc'] : [],
          task: { id: `t${task}`, input: `${task} + ${task}` },
          datasetId,
        });
      }
    },
  ]);
}

const SPEC = {
  sources: [
    { type: 'rule' as const, rule: { rule: 'numeric' as const } },
    { type: 'rule' as const, weight: 0.1, rule: { rule: 'tool-called' as const, tool: 'calc' } },
    { type: 'rule' as const, rule: { rule: 'steps-penalty' as const, max: 5 } },
  ],
};

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
    const spec = SPEC;
    started = performance.now();
    const result = await scoreRollouts({ store }, ScoreRolloutsParams.parse({ spec }));
    const ms = performance.now() - started;
    if (result.scored !== ROLLOUTS || answers !== ROLLOUTS)
      throw new Error(`rule bench: scored ${result.scored}, answers ${answers}`);
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
  const model = await RewardModel.load(path.join(MODEL, 'model.onnx'), path.join(MODEL, 'tokenizer.json'), {
    device: 'cpu',
  });
  const tokenizer = Tokenizer.load(path.join(MODEL, 'tokenizer.json'));
  // Task + answer texts of 40–60 characters, as the default template makes them.
  const texts = Array.from(
    { length: 2_048 },
    (_, i) => `q: what is ${i} + ${i}?\nthe answer is ${2 * i}${'.'.repeat(i % 20)}`,
  );
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

/**
 * 10,000 rollouts queued as they would finish, scored 32 per call with 2 calls in flight, through the daemon's
 * handlers; against one job.
 */
async function queuedScoring(work: string): Promise<void> {
  const count = 10_000;
  const store = Store.open(path.join(work, 'rewards', 'queued.db'));
  try {
    seed(store, count);
    const handlers = createHandlers({
      store,
      info: () => ({
        version: 'bench',
        pid: process.pid,
        store: store.file,
        schemaVersion: store.schemaVersion,
        startedAt: 0,
      }),
    });
    const client = { request: <M extends MethodName>(name: M, params: ParamsOf<M>) => invoke(handlers, name, params) };
    const ids: string[] = [];
    let cursor: string | undefined;
    do {
      const page = store.listRollouts({ order: 'oldest', limit: 500, cursor });
      ids.push(...page.items.map((r) => r.id));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    // Warm up (statements, the prepared scorer) so that neither side pays for it.
    await client.request('scoreRollouts', { spec: SPEC, rollouts: ids.slice(0, 100) });
    let started = performance.now();
    const job = await client.request('scoreRollouts', { spec: SPEC, rollouts: ids });
    const baselineMs = performance.now() - started;
    started = performance.now();
    const queue = new ScoringQueue(client, { source: { spec: SPEC, baseDir: work }, apiKeys: {}, atEnd: false });
    for (const id of ids) queue.add(id);
    await queue.drain();
    const ms = performance.now() - started;
    if (job.scored !== count || queue.results.size !== count)
      throw new Error(`queued scoring bench: job ${job.scored}, queue ${queue.results.size}`);
    rows.push({
      metric: `rule scoring as rollouts finish, ${fmt(count)} rollouts (32 per rewards/score call, 2 in flight)`,
      result: `${fmt(ms)} ms (${fmt(count / (ms / 1000))} rollouts/s)`,
      baseline: `${fmt(baselineMs)} ms (one job over the same rollouts)`,
      ratio: `${fmt(ms / baselineMs, 2)}×`,
      target: 'reported',
      met: '-',
    });
  } finally {
    store.close();
  }
}

export async function rewardsBenchmark(work: string): Promise<void> {
  fs.mkdirSync(path.join(work, 'rewards'), { recursive: true });
  await ruleScoring(work);
  await queuedScoring(work);
  await onnxThroughput();
}
