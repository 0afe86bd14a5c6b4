/**
 * Several policies against one shared adapter (`npm run bench -- --policies-only`): the two-role world of the
 * learning test (test/helpers/twoRoleWorld.ts: the planner must write digits, the solver letters only) trained on the
 * same budget (iterations × tasks × samples, the same lr and seeds) (a) with a LoRA adapter per role, each learning
 * from its own reward dimension, and (b) with one adapter answering and training both roles' calls on the episode
 * reward (the two roles' mean). Rows: each role's final validation reward (greedy, held-out tasks) and the episode's,
 * separate against shared, over 3 seeds; and the wall time of the budget (two updates per iteration against one).
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  SEPARATE_ADAPTERS,
  SHARED_ADAPTER,
  TWO_ROLE_BUDGET,
  trainTwoRoleWorld,
  type TwoRoleResult,
} from '../helpers/twoRoleWorld';
import { fmt, median, rows, signed } from './table';

const SEEDS = [0, 1, 2] as const;

type Role = keyof TwoRoleResult['val'];

const ROLES: ReadonlyArray<{ key: Role; label: string }> = [
  { key: 'digits', label: "planner's validation reward (its own dimension: digits)" },
  { key: 'letters', label: "solver's validation reward (its own dimension: letters only)" },
  { key: 'reward', label: 'episode validation reward (the two roles’ mean)' },
];

const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/** "0.97 (1.00, 0.92, 1.00; from 0.03)": the mean of the seeds' final values, each, and the mean before training. */
function finals(results: readonly TwoRoleResult[], role: Role): { text: string; value: number } {
  const last = results.map((r) => r.val[role].at(-1)!);
  const first = mean(results.map((r) => r.val[role][0]!));
  const value = mean(last);
  return { value, text: `${fmt(value, 2)} (${last.map((v) => fmt(v, 2)).join(', ')}; from ${fmt(first, 2)})` };
}

export async function policiesBenchmark(work: string): Promise<void> {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  if (!python) throw new Error('set LIGHTNING_TEST_PYTHON to a Python with transformers + peft (the test venv)');
  const budget = `${TWO_ROLE_BUDGET.iterations} iterations × 4 tasks × ${TWO_ROLE_BUDGET.samples} samples, lr ${TWO_ROLE_BUDGET.lr}`;
  const separate: TwoRoleResult[] = [];
  const shared: TwoRoleResult[] = [];
  for (const seed of SEEDS) {
    for (const [name, flags, into] of [
      ['separate', SEPARATE_ADAPTERS, separate],
      ['shared', SHARED_ADAPTER, shared],
    ] as const) {
      const cwd = path.join(work, 'policies', `${name}-${seed}`);
      fs.mkdirSync(cwd, { recursive: true });
      const result = await trainTwoRoleWorld(cwd, python, flags, { ...TWO_ROLE_BUDGET, seed });
      if (result.run.status !== 'succeeded') throw new Error(`${name} seed ${seed}: ${result.run.error ?? ''}`);
      console.error(
        `bench: two roles, ${name} seed ${seed}: val digits ${result.val.digits.map((v) => fmt(v, 2)).join(' ')}, ` +
          `letters ${result.val.letters.map((v) => fmt(v, 2)).join(' ')} (${fmt(result.seconds, 1)} s)`,
      );
      into.push(result);
    }
  }
  for (const { key, label } of ROLES) {
    const a = finals(separate, key);
    const b = finals(shared, key);
    rows.push({
      metric: `two roles, ${label} after ${budget}, mean of seeds ${SEEDS.join(', ')}: an adapter per role`,
      result: a.text,
      baseline: `${b.text} (one shared adapter, the episode reward)`,
      ratio: signed(a.value - b.value, 2),
      target: 'separate ≥ shared',
      met: a.value >= b.value ? 'yes' : 'NO',
    });
  }
  const seconds = (results: readonly TwoRoleResult[]): number => median(results.map((r) => r.seconds));
  rows.push({
    metric: `two roles, wall time of the budget (${budget}, validation included), median of ${SEEDS.length} seeds: an adapter per role`,
    result: `${fmt(seconds(separate), 1)} s`,
    baseline: `${fmt(seconds(shared), 1)} s (one shared adapter)`,
    ratio: `${fmt(seconds(separate) / seconds(shared), 2)}×`,
    target: 'reported (an update per policy per iteration)',
    met: '—',
  });
}
