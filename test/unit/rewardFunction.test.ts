import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import type { ScoringTask, ScoringTrajectory } from '../../trainer-daemon/protocol';
import { RewardFunctionRunner } from '../../trainer-daemon/rewards/functionRunner';
import type { Verdict } from '../../trainer-daemon/rewards/rules';
import { tempDir } from '../helpers/tmp';

const FUNCTIONS = path.join(__dirname, '..', 'fixtures', 'rewards', 'functions');

function trajectory(finalAnswer: string | null): ScoringTrajectory {
  return {
    rolloutId: 'r1',
    status: 'succeeded',
    error: null,
    finalAnswer,
    calls: [],
    toolCalls: [],
    steps: 1,
    promptTokens: 1,
    completionTokens: 1,
    errorSpans: 0,
  };
}
const task: ScoringTask = { id: 't1', input: 'q', expected: 'Paris' };

function runner(
  t: { after(fn: () => void): void },
  file: string,
  options = { timeoutMs: 2_000, memoryMb: 32 },
): RewardFunctionRunner {
  const r = new RewardFunctionRunner(path.resolve(FUNCTIONS, file), options);
  t.after(() => r.dispose());
  return r;
}

const scored = (value: number, reason: string | null = null): Verdict => ({ kind: 'scored', value, reason });

describe('reward functions in a worker thread', () => {
  test('a JS module returning {value, reason}, and an async TypeScript module importing a helper', async (t) => {
    assert.deepEqual(await runner(t, 'length.mjs').score(trajectory('abc'), task), scored(0.25, '3 characters'));
    const ts = runner(t, 'matches.ts');
    assert.deepEqual(await ts.score(trajectory(' Paris '), task), scored(1));
    assert.deepEqual(await ts.score(trajectory('Oslo'), task), scored(0));
  });

  test('a module that throws: that rollout gets the error, the next one is scored', async (t) => {
    const r = runner(t, 'throws.mjs');
    await assert.rejects(r.score(trajectory('bad'), task), /TypeError: cannot read the answer/);
    assert.deepEqual(await r.score(trajectory('fine'), task), scored(1));
  });

  test('a module that loops forever or never resolves times out; the worker is replaced', async (t) => {
    for (const file of ['loops.mjs', 'hangs.mjs']) {
      const r = runner(t, file, { timeoutMs: 300, memoryMb: 32 });
      await assert.rejects(r.score(trajectory('spin'), task), /did not answer within 300 ms/, file);
      assert.deepEqual(await r.score(trajectory('fine'), task), scored(1), file);
    }
  });

  test('garbage results are reported, naming what came back', async (t) => {
    const r = runner(t, 'garbage.mjs');
    await assert.rejects(
      r.score(trajectory('string'), task),
      /returned "high"; return a finite number or \{value: number, reason\?: string\}/,
    );
    await assert.rejects(r.score(trajectory('nan'), task), /returned null/);
    await assert.rejects(r.score(trajectory('object'), task), /returned \{"value":"x"\}/);
    await assert.rejects(r.score(trajectory('fn'), task), /could not be cloned/);
    await assert.rejects(r.score(trajectory('undefined'), task), /returned undefined/);
    assert.deepEqual(await r.score(trajectory('fine'), task), scored(0.5));
  });

  test('a module that allocates without bound hits its memory cap; this process is unharmed', async (t) => {
    const r = runner(t, 'allocates.mjs', { timeoutMs: 30_000, memoryMb: 32 });
    const before = process.memoryUsage().heapUsed;
    await assert.rejects(r.score(trajectory('hoard'), task), /ran out of memory \(cap 32 MB\)/);
    assert.deepEqual(await r.score(trajectory('fine'), task), scored(1));
    assert.ok(process.memoryUsage().heapUsed - before < 64 * 1024 * 1024, 'the hoard stayed in the worker');
  });

  test('the module does not see the daemon’s environment (API keys)', async (t) => {
    process.env.LIGHTNING_UPSTREAM_API_KEY = 'sk-secret-for-test';
    t.after(() => delete process.env.LIGHTNING_UPSTREAM_API_KEY);
    assert.deepEqual(await runner(t, 'secret.mjs').score(trajectory('x'), task), scored(0, 'no key visible'));
  });

  test('a missing module, one without a default export, and a TypeScript syntax error are clear errors', async (t) => {
    await assert.rejects(runner(t, 'nope.mjs').load(), /reward function module .*nope\.mjs does not exist/);
    const noExport = runner(t, 'noexport.mjs');
    await assert.rejects(
      noExport.score(trajectory('x'), task),
      /cannot load reward function .*noexport\.mjs: Error: the module has no default export function/,
    );
    // The same error for every rollout, without loading the module again.
    await assert.rejects(noExport.score(trajectory('y'), task), /no default export function/);
    // Written here, not committed: the test project's type check would refuse it.
    const broken = path.join(tempDir(t), 'broken.ts');
    fs.writeFileSync(
      broken,
      'export default (trajectory: { finalAnswer: string }) => trajectory.finalAnswer.length +;\n',
    );
    await assert.rejects(runner(t, broken).load(), /broken\.ts does not compile/);
  });
});
