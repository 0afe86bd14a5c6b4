/**
 * One SQLite driver measured in the runtime that runs this file (packaging.ts spawns it on Node 20
 * and on a Node with node:sqlite): the store opened fresh (migrations), then 100,000 span-like rows
 * (700-byte JSON) inserted 500 per transaction with the store's pragmas (WAL, synchronous=NORMAL).
 * Prints one JSON line: { driver, node, openMs, rowsPerSecond }.
 */
import path from 'node:path';
import { Store } from '../../trainer-daemon/store/store';
import { parsed } from '../helpers/params';
import { rolloutKey } from '../helpers/store';

const dir = process.argv[2]!;
const ROWS = 100_000;
const PER_TXN = 500;

let started = performance.now();
const store = Store.open(path.join(dir, 'store.db'));
const openMs = performance.now() - started;
const rollout = rolloutKey(store, store.createRollout(parsed('createRollout', {})).id);
const attributes = JSON.stringify({
  'gen_ai.request.model': 'm',
  'lightning.request': { messages: [{ role: 'user', content: 'x'.repeat(600) }] },
});
const insert = store.db
  .prepare(`INSERT INTO spans (rollout, attempt, sequence, trace_id, span_id, parent_span_id, name, kind,
  category, start_ms, end_ms, status_code, status_message, attributes, events, prompt_tokens, completion_tokens)
  VALUES (?, 0, ?, 't', ?, NULL, 'chat', 'client', 'llm', ?, ?, 'ok', NULL, ?, '[]', 10, 5)`);
const batch = store.db.transaction((from: number) => {
  for (let i = from; i < from + PER_TXN; i += 1) insert.run(rollout, i + 1, `s${i}`, i, i + 1, attributes);
});
started = performance.now();
for (let from = 0; from < ROWS; from += PER_TXN) batch.immediate(from);
const rowsPerSecond = ROWS / ((performance.now() - started) / 1000);
console.log(JSON.stringify({ driver: store.driver, node: process.version, openMs, rowsPerSecond }));
store.close();
