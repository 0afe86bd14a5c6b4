/**
 * The CLI against inputs sized to break it (issue 28): `lightning show` on a 120,000-span rollout (an RPC answer of
 * hundreds of MB at 300,000), a table wider than the stack, `lightning dataset import` of /dev/zero and of a FIFO that
 * never ends.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { table } from '../../trainer-daemon/cli/textTable';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { runCli, startDaemon } from '../helpers/daemon';
import { parsed } from '../helpers/params';
import { llmSpan } from '../helpers/spans';
import { rolloutKey } from '../helpers/store';
import { tempDir } from '../helpers/tmp';

/**
 * The rollout's spans: past every bound the reads keep (`show`'s 10,000 and `--span-limit`'s, an RPC answer's 100,000
 * and a page's 10,000), so each is seen to hold; 300,000 took 14 s here for no bound more.
 */
const SPANS = 120_000;
/** The table's rows: past what a spread into Math.max takes (the stack). */
const TABLE_ROWS = 300_000;

/** A finished rollout of SPANS tool spans, written straight into SQLite (the write path would take minutes). */
function seedHugeRollout(file: string): string {
  const store = Store.open(file);
  try {
    const rollout = store.createRollout(parsed('createRollout', { label: 'huge' }));
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'running' }));
    store.addSpans({ rolloutId: rollout.id, spans: [llmSpan({ name: 'chat first' })] });
    const insert = store.db
      .prepare(`INSERT INTO spans (rollout, attempt, sequence, trace_id, span_id, parent_span_id, name, kind, category,
      start_ms, end_ms, status_code, status_message, attributes, events, prompt_tokens, completion_tokens, response_id)
      VALUES (?, 1, ?, '4bf92f3577b34da6a3ce929d0e0e4736', ?, NULL, ?, 'internal', 'tool', ?, ?, 'ok', NULL, '{"tool.name":"search"}', '[]', NULL, NULL, NULL)`);
    const key = rolloutKey(store, rollout.id);
    store.db.transaction(() => {
      for (let i = 2; i <= SPANS; i += 1)
        insert.run(key, i, i.toString(16).padStart(16, '0'), `tool ${i}`, 1_700_000_000_000 + i, 1_700_000_000_001 + i);
      store.db.prepare('UPDATE rollouts SET span_count = ? WHERE id = ?').run(SPANS, rollout.id);
    })();
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'succeeded', exitCode: 0 }));
    return rollout.id;
  } finally {
    store.close();
  }
}

test('a table of 300,000 rows is laid out (no spread into Math.max)', () => {
  const rows = Array.from({ length: TABLE_ROWS }, (_, i) => [String(i), 'x'.repeat(i % 17)]);
  const text = table(['SEQ', 'NAME'], rows);
  assert.equal(text.split('\n').length, TABLE_ROWS + 1);
  assert.match(text.split('\n')[0]!, /^SEQ {5}NAME$/);
});

test('lightning show on a 120,000-span rollout: the first 10,000 spans and a line saying how many more, from the store and over RPC', async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, 'store.db');
  const id = seedHugeRollout(file);

  const direct = await runCli(['show', id, '--store', file]);
  assert.equal(direct.code, 0, direct.stderr);
  assert.match(direct.stdout, new RegExp(`… and ${SPANS - 10_000} more spans, not shown`));
  assert.doesNotMatch(direct.stderr, /Maximum call stack/);

  const daemon = await startDaemon(file);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const detail = await client.request('getRollout', { id });
  assert.equal(detail.spans.length, 10_000);
  assert.equal(detail.spansLeftOut, SPANS - 10_000);
  const wide = await client.request('getRollout', { id, spanLimit: 100_000 });
  assert.equal(wide.spans.length, 100_000);
  assert.equal(wide.spansLeftOut, SPANS - 100_000);
  await assert.rejects(
    client.request('getRollout', { id, spanLimit: 100_001 }),
    /spanLimit/,
    'no answer holds more than 100,000 spans',
  );
  // The rest is read a page at a time (spans/list, at most 10,000 an answer): every span, in order, and no answer
  // holds more than a page of them (the 788 MB, 40 s answer of the whole rollout is gone).
  let after = 0;
  let read = 0;
  for (;;) {
    const { items } = await client.request('listSpans', { rolloutId: id, afterSequence: after, limit: 10_000 });
    if (items.length === 0) break;
    assert.ok(items.length <= 10_000);
    assert.equal(items[0]!.sequence, after + 1, 'pages follow one another without a gap');
    after = items.at(-1)!.sequence;
    read += items.length;
  }
  assert.equal(read, SPANS);
  const viaRpc = await runCli(['show', id, '--store', file, '--span-limit', '20000']);
  assert.equal(viaRpc.code, 0, viaRpc.stderr);
  assert.match(viaRpc.stdout, new RegExp(`… and ${SPANS - 20_000} more spans`));
  const bad = await runCli(['show', id, '--store', file, '--span-limit', '0']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /--span-limit 0: expected an integer 1\.\.100000/);
});

/** `lightning dataset import FILE` with a time limit: a read that never ends fails the test instead of hanging it. */
function importFile(
  file: string,
  store: string,
  env: NodeJS.ProcessEnv = {},
): { status: number | null; stderr: string; ms: number } {
  const started = Date.now();
  const result = spawnSync(
    process.execPath,
    [
      path.join(__dirname, '..', '..', 'dist', 'cli.js'),
      'dataset',
      'import',
      file,
      '--store',
      store,
      '--name',
      'endless',
    ],
    {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, ...env },
    },
  );
  return { status: result.status, stderr: result.stderr, ms: Date.now() - started };
}

test('lightning dataset import /dev/zero stops at the line cap, naming it; nothing is imported', (t) => {
  const store = path.join(tempDir(t), 'store.db');
  const result = importFile('/dev/zero', store);
  assert.notEqual(result.status, null, 'the import ended (it did not run into the time limit)');
  assert.notEqual(result.status, 0);
  assert.match(result.stderr, /\/dev\/zero: line 1 is over the 8388608-byte limit for one task/);
});

test('lightning dataset import of an endless FIFO stops at the byte cap, naming it', (t) => {
  const dir = tempDir(t);
  const fifo = path.join(dir, 'tasks.jsonl');
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0, 'mkfifo');
  // A writer that never stops: short valid lines, forever (it ends on SIGPIPE once the reader is gone).
  const writer = spawn('sh', ['-c', `exec yes '{"question":"1+1"}' > '${fifo}'`], { stdio: 'ignore' });
  t.after(() => writer.kill());
  const result = importFile(fifo, path.join(dir, 'store.db'), {
    LIGHTNING_MAX_DATASET_BYTES: String(16 * 1024 * 1024),
  });
  assert.notEqual(result.status, null, 'the import ended (it did not run into the time limit)');
  assert.notEqual(result.status, 0);
  assert.match(result.stderr, /over the 16777216-byte limit for a dataset \(LIGHTNING_MAX_DATASET_BYTES\)/);
});
