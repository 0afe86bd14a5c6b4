// needs: venv
/**
 * Several policies learn, each its own role: `lightning train --policy planner=… --policy solver=… --policy-reward
 * planner=digits --policy-reward solver=letters` through the real daemon and the test venv's trainer worker, on a
 * tiny Qwen2 built from its config (random weights, seeded), agents in worker mode
 * (test/fixtures/agents/two-role-learner.mjs: the planner must write digits, the solver letters only — opposite
 * behaviour, each scored densely on its own reward dimension). Both policies' validation rewards
 * (`policy/<name>/val/reward`, greedy, on held-out tasks) rise by a clear margin from the evaluation before training
 * to the last two. The bench (test/bench/policies.ts) trains the same world on the same budget with one shared
 * adapter as well.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metricPoints } from '../../trainer-daemon/protocol';
import { SEPARATE_ADAPTERS, TWO_ROLE_BUDGET, trainTwoRoleWorld } from '../helpers/twoRoleWorld';
import { venvPython } from '../helpers/tinyHf';
import { tempDir } from '../helpers/tmp';

test(
  'two policies trained together each learn their own role: both validation rewards rise (planner: digits, solver: letters)',
  { timeout: 600_000 },
  async (t) => {
    const result = await trainTwoRoleWorld(tempDir(t), venvPython(), SEPARATE_ADAPTERS, TWO_ROLE_BUDGET);
    assert.equal(result.run.status, 'succeeded', `${result.run.error ?? ''}\n${result.output}`);
    const curves = {
      planner: metricPoints(result.metrics, 'policy/planner/val/reward'),
      solver: metricPoints(result.metrics, 'policy/solver/val/reward'),
    };
    const evaluations = TWO_ROLE_BUDGET.iterations / TWO_ROLE_BUDGET.evalEvery + 1;
    for (const [policy, points] of Object.entries(curves)) {
      t.diagnostic(`${policy} val/reward by step: ${points.map((p) => `${p.step}:${p.value.toFixed(2)}`).join(' ')}`);
      assert.deepEqual(
        points.map((p) => p.step),
        Array.from({ length: evaluations }, (_, i) => i * TWO_ROLE_BUDGET.evalEvery),
        `${policy}: validated before training and every ${TWO_ROLE_BUDGET.evalEvery} iterations`,
      );
    }
    // Each policy's recorded validation reward is its own dimension's mean over the validation rollouts.
    const close = (a: readonly number[], b: readonly number[]): boolean =>
      a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) < 1e-9);
    assert.ok(
      close(
        curves.planner.map((p) => p.value),
        result.val.digits,
      ),
      'planner: the digits dimension',
    );
    assert.ok(
      close(
        curves.solver.map((p) => p.value),
        result.val.letters,
      ),
      'solver: the letters dimension',
    );

    // The end as the mean of the last two evaluations: greedy decoding on 8 held-out tasks can dip at one validation
    // (a role at 1.00 showed 0.17 once before recovering), and the claim is that each role ends better, not that no
    // single point dips.
    for (const [policy, points] of Object.entries(curves)) {
      const first = points[0]!.value;
      const end = (points.at(-2)!.value + points.at(-1)!.value) / 2;
      assert.ok(
        end >= first + 0.2,
        `${policy}: validation reward ${first.toFixed(2)} → ${end.toFixed(2)} (the last two evaluations' mean) over ${TWO_ROLE_BUDGET.iterations} iterations (${points.map((p) => p.value.toFixed(2)).join(' ')})\n${result.output}`,
      );
    }
  },
);
