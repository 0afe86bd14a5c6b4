/**
 * LightningRL: transitions for 10,000 rollouts × 10 LLM calls (100,000 spans) from a store,
 * against reading the same rows and parsing their JSON (the floor any builder pays).
 */
import path from 'node:path';
import { AdvantageOptions, RewardPolicy } from '../../trainer-daemon/protocol';
import { buildTransitions } from '../../trainer-daemon/lightningrl/transitions';
import { Store } from '../../trainer-daemon/store/store';
import { fmt, rows } from './table';

const ROLLOUTS = 10_000;
const CALLS = 10;

function seed(file: string): void {
  const store = Store.open(file);
  const rollout = store.db
    .prepare(`INSERT INTO rollouts (id, status, mode, task_id, task_input, source, created_at, updated_at, attempt_count, span_count, llm_calls)
    VALUES (?, 'succeeded', 'train', ?, '{"q":"2+2"}', '{"kind":"api"}', ?, ?, 1, ${CALLS}, ${CALLS})`);
  const span = store.db
    .prepare(`INSERT INTO spans (rollout, attempt, sequence, trace_id, span_id, name, kind, category, start_ms, end_ms, status_code, attributes, events, prompt_tokens, completion_tokens)
    VALUES (?, 1, ?, ?, ?, 'chat m', 'client', 'llm', ?, ?, 'ok', ?, '[]', 40, 8)`);
  const reward = store.db.prepare(
    `INSERT INTO rewards (rollout_id, name, value, source, created_at) VALUES (?, 'reward', ?, 'agent', 0)`,
  );
  store.db.transaction(() => {
    for (let r = 0; r < ROLLOUTS; r += 1) {
      const id = `ro-${r.toString(16).padStart(16, '0')}`;
      const key = rollout.run(id, `task-${r % 1000}`, r, r).lastInsertRowid;
      for (let c = 0; c < CALLS; c += 1) {
        const attributes = {
          'lightning.api': 'chat.completions',
          'gen_ai.request.model': 'm',
          'lightning.request': {
            model: 'm',
            messages: [
              { role: 'system', content: 'You are terse.' },
              { role: 'user', content: `Question ${r}.${c}: what is 2+2?` },
            ],
          },
          'lightning.response': {
            id: `resp-${r}-${c}`,
            choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'It is 4.' } }],
          },
          'lightning.prompt_token_ids': Array.from({ length: 24 }, (_, i) => i),
          'lightning.response_token_ids': [7, 8, 9, 10],
        };
        span.run(
          key,
          c + 1,
          r.toString(16).padStart(32, '0'),
          (r * CALLS + c).toString(16).padStart(16, '0'),
          c,
          c + 1,
          JSON.stringify(attributes),
        );
      }
      reward.run(id, r % 3 === 0 ? 1 : 0);
    }
  })();
  store.close();
}

export function lightningRlBenchmark(work: string): void {
  const file = path.join(work, 'lightningrl', 'store.db');
  seed(file);
  const store = Store.open(file);
  try {
    let started = performance.now();
    let parsed = 0;
    for (const row of store.db
      .prepare('SELECT attributes FROM spans ORDER BY rollout, sequence')
      .iterate() as Iterable<{ attributes: string }>) {
      parsed += Object.keys(JSON.parse(row.attributes) as object).length;
    }
    const floorMs = performance.now() - started;
    started = performance.now();
    const { transitions, report } = buildTransitions(store.trajectories({}), {
      reward: RewardPolicy.parse({}),
      credit: { kind: 'identical' },
      advantage: AdvantageOptions.parse({}),
    });
    const ms = performance.now() - started;
    rows.push({
      metric: `LightningRL transitions, ${fmt(ROLLOUTS)} rollouts × ${CALLS} LLM calls (${fmt(report.transitions)} built, GRPO over ${fmt(ROLLOUTS / 10)} task groups)`,
      result: `${fmt(ms)} ms`,
      baseline: `${fmt(floorMs)} ms (read the same spans and parse their JSON; ${fmt(parsed)} attributes)`,
      ratio: `${fmt(ms / floorMs, 2)}×`,
      target: '≤ 2,000 ms',
      met: ms <= 2_000 && transitions.length === ROLLOUTS * CALLS ? 'yes' : 'NO',
    });
  } finally {
    store.close();
  }
}
