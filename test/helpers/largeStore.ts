/**
 * A store with many finished rollouts, as months of use would leave it, written straight into SQLite in one transaction
 * (the daemon's write path would take minutes for 100,000): for the list benchmarks and the panel's scrolling
 * measurement. Ids sort by creation, statuses and modes cycle, labels and tasks repeat.
 */
import { Store } from '../../trainer-daemon/store/store';

export function seedRollouts(file: string, count: number): void {
  const store = Store.open(file);
  try {
    const insert = store.db
      .prepare(`INSERT INTO rollouts (id, status, mode, label, task_id, task_input, source, created_at, updated_at,
      llm_calls, span_count, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, '{"kind":"api"}', ?, ?, 3, 5, 300, 60)`);
    const statuses = ['succeeded', 'succeeded', 'succeeded', 'failed', 'timeout', 'cancelled'];
    const modes = ['train', 'train', 'val', 'debug'];
    const start = Date.now() - count * 1000;
    store.db.transaction(() => {
      for (let i = 0; i < count; i += 1) {
        insert.run(
          `ro-${i.toString(16).padStart(16, '0')}`,
          statuses[i % statuses.length],
          modes[i % modes.length],
          `agent-${i % 7}`,
          `task-${i % 500}`,
          JSON.stringify({ question: `What is ${i} + ${i % 13}?` }),
          start + i * 1000,
          start + i * 1000,
        );
      }
    })();
  } finally {
    store.close();
  }
}
