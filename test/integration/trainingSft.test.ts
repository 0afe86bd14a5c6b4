// needs: torch
/**
 * `lightning train --algorithm sft` end to end with real parts: rollouts recorded through the proxy by an agent run
 * with `lightning dataset run` against a scripted teacher, rated good (1) or bad (0); the daemon fine-tunes the tiny
 * built-in policy in the real Python trainer worker (Debian's PyTorch) on the good ones' chat rows, a tool call among
 * them, with a rollout held out for validation and a checkpoint per epoch under retention. Afterwards the newest
 * checkpoint, served by a fresh worker, answers every trained prompt greedily with the good answer — which the same
 * policy before training did not — and `train --list` and the run's metrics show it.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { z } from 'zod';
import { Checkpoint, SftTrainingRunSummary } from '../../trainer-daemon/protocol';
import { createLogger } from '../../trainer-daemon/log';
import { Store } from '../../trainer-daemon/store/store';
import { heldOutRollouts } from '../../trainer-daemon/training/sftRows';
import { TrainerWorker } from '../../trainer-daemon/training/worker';
import { runCli } from '../helpers/daemon';
import { RATED_TASKS, recordRatedRollouts, startTeacher } from '../helpers/ratedRollouts';
import { tempDir } from '../helpers/tmp';

const VAL_FRACTION = 0.2;
const EPOCHS = 30;

interface Row {
  readonly messages: Array<Record<string, unknown>>;
  readonly tools?: unknown[];
  /** The good rollout's reply: its text, or the tool it called with its arguments. */
  readonly answer: string;
}

/** The good rollouts' calls as rows: what SFT trains on, by rollout id. */
function goodRows(storeFile: string): Map<string, Row[]> {
  const store = Store.open(storeFile, { readonly: true });
  try {
    const rows = new Map<string, Row[]>();
    for (const { rollout, spans } of store.trajectories({})) {
      if (!(rollout.task?.input as { good?: boolean } | undefined)?.good) continue;
      rows.set(
        rollout.id,
        spans
          .filter((span) => span.category === 'llm')
          .map((span) => {
            const request = span.attributes['lightning.request'] as {
              messages: Array<Record<string, unknown>>;
              tools?: unknown[];
            };
            const reply = (
              span.attributes['lightning.response'] as {
                choices: Array<{ message: { content: string | null; tool_calls?: unknown[] } }>;
              }
            ).choices[0]!.message;
            return {
              messages: request.messages,
              ...(request.tools ? { tools: request.tools } : {}),
              answer: said(reply),
            };
          }),
      );
    }
    return rows;
  } finally {
    store.close();
  }
}

/** A reply as one comparable string: its text, or `name(arguments)` for each tool call. */
function said(message: { content?: string | null; tool_calls?: unknown[] }): string {
  const calls = (message.tool_calls ?? []) as Array<{ function: { name: string; arguments: string } }>;
  if (calls.length > 0)
    return calls.map((c) => `${c.function.name}(${JSON.stringify(JSON.parse(c.function.arguments))})`).join(';');
  return message.content ?? '';
}

/** What a policy answers greedily to each row, through its OpenAI-compatible endpoint (a real trainer worker). */
async function answers(load: Record<string, unknown>, rows: readonly Row[]): Promise<string[]> {
  const worker = await TrainerWorker.start({
    python: '/usr/bin/python3',
    logger: createLogger('test', { level: 'error' }),
  });
  try {
    await worker.request('load', { device: 'cpu', threads: 1, ...load });
    const { url } = await worker.request('serve', {});
    const out: string[] = [];
    for (const row of rows) {
      const res = await fetch(`${url}/greedy/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'policy', messages: row.messages, tools: row.tools, max_tokens: 40 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      out.push(
        said(((await res.json()) as { choices: Array<{ message: Row['answer'] & object }> }).choices[0]!.message),
      );
    }
    return out;
  } finally {
    await worker.shutdown();
  }
}

test('sft on good rollouts: the fine-tuned tiny policy answers the good answers, a tool call included, which it did not before', async (t) => {
  const cwd = tempDir(t);
  const teacher = await startTeacher();
  t.after(() => teacher.close());
  assert.equal(await recordRatedRollouts(cwd, teacher), RATED_TASKS.length * 2);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  const good = goodRows(storeFile);
  assert.equal(good.size, RATED_TASKS.length);

  // A seed whose split holds out one rollout that answered in text: the tool-calling ones all train.
  const toolCalling = (id: string): boolean => good.get(id)!.some((row) => row.tools !== undefined);
  const seed = Array.from({ length: 200 }, (_, i) => i).find((candidate) => {
    const held = heldOutRollouts([...good.keys()], VAL_FRACTION, candidate);
    return held.size === 1 && ![...held].some(toolCalling);
  })!;
  const held = heldOutRollouts([...good.keys()], VAL_FRACTION, seed);
  const trained = [...good].filter(([id]) => !held.has(id)).flatMap(([, rows]) => rows);
  assert.ok(
    trained.some((row) => row.answer.startsWith('get_weather(')),
    'a tool call among the trained rows',
  );
  assert.ok(
    trained.some((row) => row.messages.some((m) => m.role === 'tool')),
    'a tool result in a trained prompt',
  );

  // The policy the run starts from: `--model tiny` (its default size) initialised from the run's seed.
  const before = await answers({ model: { kind: 'tiny' }, adapter: { kind: 'full' }, seed }, trained);
  const wanted = trained.map((row) => row.answer);
  assert.ok(
    before.every((answer, i) => answer !== wanted[i]),
    `the base policy does not know the answers yet: ${JSON.stringify(before)}`,
  );

  const run = await runCli(
    [
      'train',
      '--algorithm',
      'sft',
      '--model',
      'tiny',
      '--python',
      '/usr/bin/python3',
      '--device',
      'cpu',
      '--val-fraction',
      String(VAL_FRACTION),
      '--epochs',
      String(EPOCHS),
      '--batch-size',
      '2',
      '--seed',
      String(seed),
      '--keep-checkpoints',
      '2',
      '--json',
    ],
    { cwd },
  );
  assert.equal(run.code, 0, run.stdout + run.stderr);
  // The --json line: `training-finished` with the run and its checkpoints.
  const finished = z
    .object({ run: SftTrainingRunSummary, checkpoints: z.array(Checkpoint) })
    .parse(JSON.parse(run.stdout.trim().split('\n').at(-1)!));
  assert.equal(finished.run.status, 'succeeded', finished.run.error ?? '');
  assert.equal(finished.run.algorithm, 'sft');

  const after = await answers({ checkpoint: finished.checkpoints.at(-1)!.path }, trained);
  assert.deepEqual(after, wanted, 'the fine-tuned policy answers as the good rollouts did');

  // The run's record: the rows and the base policy's validation at step 0, an epoch a step with its validation;
  // retention kept the best by validation loss and the last two, optimizer state only in the newest.
  const store = Store.open(storeFile, { readonly: true });
  t.after(() => store.close());
  const { metrics } = store.getTrainingRun(finished.run.id);
  const at = (step: number, name: string): number | undefined =>
    metrics.find((m) => m.step === step && m.name === name)?.value;
  assert.equal(at(0, 'rows/train'), trained.length);
  assert.equal(at(0, 'rollouts/val'), 1);
  // The split is kept beside the run's checkpoints, for a resume to keep it.
  const split = JSON.parse(
    fs.readFileSync(path.join(cwd, '.lightning', 'checkpoints', finished.run.id, 'split.json'), 'utf8'),
  ) as { train: string[]; val: string[] };
  assert.deepEqual(split.val, [...held]);
  assert.deepEqual(new Set(split.train), new Set([...good.keys()].filter((id) => !held.has(id))));
  assert.equal(
    at(0, 'rows/val'),
    [...held].reduce((sum, id) => sum + good.get(id)!.length, 0),
  );
  for (let epoch = 0; epoch <= EPOCHS; epoch += 1)
    assert.ok(Number.isFinite(at(epoch, 'val/loss')), `val/loss at ${epoch}`);
  assert.ok(at(EPOCHS, 'loss')! < at(1, 'loss')!, 'the training loss fell');
  const kept = finished.checkpoints;
  assert.ok(kept.length >= 2 && kept.length <= 3, `kept steps ${kept.map((c) => c.step).join(', ')}`);
  assert.deepEqual(
    kept.slice(-2).map((c) => c.step),
    [EPOCHS - 1, EPOCHS],
  );
  const bestLoss = Math.min(...metrics.filter((m) => m.name === 'val/loss' && m.step > 0).map((m) => m.value));
  assert.ok(
    kept.some((c) => at(c.step, 'val/loss') === bestLoss),
    'the best by validation loss is kept',
  );

  const listed = await runCli(['train', '--list'], { cwd });
  assert.equal(listed.code, 0, listed.stderr);
  const line = listed.stdout.split('\n').find((l) => l.startsWith(finished.run.id))!;
  assert.match(
    line,
    new RegExp(`^${finished.run.id} +sft +succeeded +${EPOCHS} +- +${at(EPOCHS, 'val/accuracy')!.toFixed(2)} +local`),
  );
});
