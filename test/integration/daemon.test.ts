import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import WebSocket from 'ws';
import { DiscoveryFile, type Rollout, type SpanRange } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { LATEST_SCHEMA_VERSION, migrate } from '../../trainer-daemon/store/migrations';
import { openConnection } from '../../trainer-daemon/store/driver';
import { runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { llmSpan } from '../helpers/spans';
import { agentRollout } from '../helpers/editorFixtures';
import { isSlim } from '../../trainer-daemon/protocol/slimSpan';
import { tempDir, waitFor } from '../helpers/tmp';

async function withDaemon(
  t: Parameters<typeof tempDir>[0],
): Promise<{ daemon: RunningDaemon; store: string; client: RpcClient }> {
  const store = path.join(tempDir(t), '.lightning', 'store.db');
  const daemon = await startDaemon(store);
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  return { daemon, store, client };
}

/** The status line of a WebSocket upgrade attempt with the given headers. */
function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`${url.replace('http', 'ws')}/rpc`, { headers });
    socket.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      socket.terminate();
    });
    socket.once('open', () => {
      resolve(101);
      socket.close();
    });
    socket.once('error', reject);
  });
}

function countRows(store: string, table: string): number {
  const db = new BetterSqlite3(store, { readonly: true });
  try {
    return (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** A store as Lightning's schema 11 left it: one finished rollout of three spans. */
function storeOfVersion11(t: TestContext): string {
  const store = path.join(tempDir(t), '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(store), { recursive: true });
  const { db: old } = openConnection(store, { readonly: false });
  migrate(old, 11);
  old
    .prepare(
      `INSERT INTO rollouts (id, status, mode, source, created_at, updated_at, attempt_count, span_count)
        VALUES ('ro-00000000000000a1', 'succeeded', 'debug', '{"kind":"api"}', 1, 1, 1, 3)`,
    )
    .run();
  const span = old.prepare(`INSERT INTO spans (rollout_id, attempt, sequence, trace_id, span_id, name, kind, category,
      start_ms, end_ms, status_code, attributes, events) VALUES ('ro-00000000000000a1', 1, ?, '4bf92f3577b34da6a3ce929d0e0e4736', ?,
      'chat m', 'client', 'llm', 1, 2, 'ok', '{}', '[]')`);
  for (let i = 1; i <= 3; i += 1) span.run(i, `00f067aa0ba902b${i}`);
  old.close();
  return store;
}

describe('daemon process', () => {
  test('serve prints the contract ready line and writes discovery files; the token file is owner-only', async (t) => {
    const { daemon, store } = await withDaemon(t);
    assert.match(daemon.ready.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(daemon.ready.store, store);
    assert.equal(daemon.ready.pid, daemon.process.pid);
    const info = DiscoveryFile.parse(
      JSON.parse(fs.readFileSync(path.join(path.dirname(store), 'daemon.json'), 'utf8')),
    );
    assert.equal(info.url, daemon.ready.url);
    assert.equal(info.pid, daemon.process.pid);
    assert.equal(fs.readFileSync(info.tokenFile, 'utf8').trim(), daemon.ready.token);
    assert.equal(fs.statSync(info.tokenFile).mode & 0o777, 0o600);
    assert.ok(!daemon.stderr().includes(daemon.ready.token), 'the token must never be logged');
    for (const line of daemon.stderr().trim().split('\n'))
      assert.doesNotThrow(() => JSON.parse(line), `log line is not JSON: ${line}`);
    assert.equal(daemon.upgrade, undefined, 'a new store is not an upgrade');
  });

  test('a store an earlier Lightning wrote: serve says it upgrades it (from, to, its spans) before the ready line, and every span is served after', async (t) => {
    const store = storeOfVersion11(t);
    const daemon = await startDaemon(store);
    t.after(() => daemon.stop());
    assert.deepEqual(daemon.upgrade, { event: 'store-upgrading', from: 11, to: LATEST_SCHEMA_VERSION, spans: 3 });
    const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
    t.after(() => client.dispose());
    assert.equal((await client.request('daemonInfo', {})).schemaVersion, LATEST_SCHEMA_VERSION);
    const detail = await client.request('getRollout', { id: 'ro-00000000000000a1' });
    assert.deepEqual(
      detail.spans.map((s) => s.spanId),
      ['00f067aa0ba902b1', '00f067aa0ba902b2', '00f067aa0ba902b3'],
    );
    assert.match(daemon.stderr(), /upgrading the store an earlier Lightning wrote/);
    assert.ok(
      !fs.existsSync(path.join(path.dirname(store), 'daemon.upgrading')),
      'the upgrade is over: its marker gone',
    );
  });

  test('a CLI command that opens an older store itself (no daemon) says on stderr that it upgrades it, then answers', async (t) => {
    const store = storeOfVersion11(t);
    const listed = await runCli(['rollouts', '--store', store, '--json']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stderr, /upgrading the store an earlier Lightning wrote \(schema 11 to \d+, 3 spans\)/);
    assert.match(listed.stdout, /ro-00000000000000a1/);
    const again = await runCli(['rollouts', '--store', store, '--json']);
    assert.doesNotMatch(again.stderr, /upgrading/, 'upgraded once');
  });

  test('a command never upgrades a store under a daemon: one upgrading it (daemon.upgrading), one of an earlier Lightning serving it', async (t) => {
    const store = storeOfVersion11(t);
    const dir = path.dirname(store);
    const schema = (): number => {
      const db = new BetterSqlite3(store, { readonly: true });
      try {
        return db.pragma('user_version', { simple: true }) as number;
      } finally {
        db.close();
      }
    };
    // A live pid of this user's (this test's own) in the daemon's files.
    fs.writeFileSync(
      path.join(dir, 'daemon.upgrading'),
      JSON.stringify({ pid: process.pid, from: 11, to: 12, spans: 3 }),
    );
    const upgrading = await runCli(['rollouts', '--store', store, '--json']);
    assert.notEqual(upgrading.code, 0);
    assert.match(
      upgrading.stderr,
      /the Lightning daemon \(pid \d+\) is upgrading .*store\.db \(3 spans\); run this again once it is ready/,
    );
    assert.equal(schema(), 11, 'nothing was changed');
    fs.rmSync(path.join(dir, 'daemon.upgrading'));

    fs.writeFileSync(path.join(dir, 'daemon.token'), `${'t'.repeat(40)}\n`, { mode: 0o600 });
    fs.writeFileSync(
      path.join(dir, 'daemon.json'),
      JSON.stringify({
        url: 'http://127.0.0.1:9',
        pid: process.pid,
        store,
        tokenFile: path.join(dir, 'daemon.token'),
        version: '0.0.9',
        startedAt: 1,
      }),
    );
    const exported = await runCli(['export', '--store', store, '--out', path.join(dir, 'rows.jsonl')]);
    assert.notEqual(exported.code, 0);
    assert.match(
      exported.stderr,
      /serving .*store\.db \(pid \d+, version 0\.0\.9\) uses its schema 11, which this Lightning would upgrade to \d+ under it; stop that daemon/,
    );
    assert.equal(schema(), 11, 'nothing was changed');
    assert.ok(!fs.existsSync(path.join(dir, 'rows.jsonl')));
  });

  test('RPC needs the bearer token, refuses browser origins and foreign Host headers', async (t) => {
    const { daemon } = await withDaemon(t);
    const { url, token } = daemon.ready;
    assert.equal(await upgradeStatus(url, {}), 401);
    assert.equal(await upgradeStatus(url, { authorization: 'Bearer wrong-token' }), 401);
    assert.equal(await upgradeStatus(url, { authorization: `Bearer ${token}`, origin: 'https://evil.example' }), 403);
    assert.equal(await upgradeStatus(url, { authorization: `Bearer ${token}`, host: 'evil.example' }), 404);
    assert.equal(await upgradeStatus(url, { authorization: `Bearer ${token}` }), 101);
    const rebinding = await new Promise<number>((resolve) => {
      http.get(`${url}/health`, { headers: { host: `attacker.example:${new URL(url).port}` } }, (res) =>
        resolve(res.statusCode ?? 0),
      );
    });
    assert.equal(rebinding, 403);
  });

  test('bad params get a JSON-RPC error naming the field, and nothing is written', async (t) => {
    const { client, store } = await withDaemon(t);
    const rollout = await client.request('createRollout', { label: 'x' });
    const cases: Array<[string, unknown, RegExp]> = [
      ['lightning/rewards/add', { rolloutId: rollout.id, value: 'high' }, /params\.value: .*expected number/],
      ['lightning/rewards/add', { rolloutId: rollout.id, value: 1, source: 'oracle' }, /params\.source/],
      ['lightning/rewards/add', { rolloutId: rollout.id, value: 1, bogus: true }, /bogus/],
      ['lightning/rollouts/create', { mode: 'production' }, /params\.mode/],
      ['lightning/rollouts/list', { limit: 100000 }, /params\.limit/],
      ['lightning/rollouts/transition', { id: rollout.id, to: 'finished' }, /params\.to/],
    ];
    for (const [method, params, message] of cases) {
      await assert.rejects(client.requestRaw(method, params), (error: { code: number; message: string }) => {
        assert.equal(error.code, -32602, `${method} ${JSON.stringify(params)}`);
        assert.match(error.message, message);
        return true;
      });
    }
    await assert.rejects(
      client.requestRaw('lightning/rollouts/transition', { id: rollout.id, to: 'succeeded' }),
      (error: { code: number; message: string }) => {
        assert.equal(error.code, -32010);
        assert.match(error.message, /is queued and cannot become succeeded/);
        return true;
      },
    );
    await assert.rejects(client.requestRaw('lightning/nope', {}), (error: { code: number }) => error.code === -32601);
    await assert.rejects(
      client.request('getRollout', { id: 'ro-0000000000000000' }),
      (error: unknown) => error instanceof DaemonError && error.kind === 'not_found',
    );
    assert.equal(countRows(store, 'rewards'), 0);
    assert.equal(countRows(store, 'rollouts'), 1);
    assert.equal((await client.request('getRollout', { id: rollout.id })).rollout.status, 'queued');
  });

  test('a frame that is not JSON gets a parse error and the connection keeps working', async (t) => {
    const { daemon } = await withDaemon(t);
    const socket = new WebSocket(`${daemon.ready.url.replace('http', 'ws')}/rpc`, {
      headers: { authorization: `Bearer ${daemon.ready.token}` },
    });
    t.after(() => socket.close());
    await new Promise((resolve) => socket.once('open', resolve));
    const replies: Array<{ id: unknown; error?: { code: number; message: string }; result?: unknown }> = [];
    socket.on('message', (data) => replies.push(JSON.parse(data.toString())));
    socket.send('{not json');
    socket.send(JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'lightning/stats/get' }]));
    socket.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'lightning/stats/get', params: {} }));
    await waitFor(() => replies.length === 3, 'three replies');
    assert.deepEqual(
      replies.slice(0, 2).map((r) => r.error?.code),
      [-32700, -32700],
    );
    assert.match(replies[1]!.error!.message, /batch requests are not supported/);
    assert.equal(replies[2]!.id, 2);
    assert.equal((replies[2]!.result as { rollouts: number }).rollouts, 0);
  });

  test('a message over the size limit closes that connection; the daemon keeps serving', async (t) => {
    const { daemon, client } = await withDaemon(t);
    const socket = new WebSocket(`${daemon.ready.url.replace('http', 'ws')}/rpc`, {
      headers: { authorization: `Bearer ${daemon.ready.token}` },
    });
    await new Promise((resolve) => socket.once('open', resolve));
    const closed = new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
    socket.on('error', () => {});
    socket.send(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'lightning/rollouts/create',
        params: { label: 'x'.repeat(17 * 1024 * 1024) },
      }),
    );
    assert.equal(await closed, 1009);
    assert.equal((await client.request('getStats', {})).rollouts, 0);
  });

  test('notifications: rollouts/changed and spans/added arrive batched, with the latest state', async (t) => {
    const { client } = await withDaemon(t);
    assert.equal((await client.request('daemonInfo', {})).schemaVersion, LATEST_SCHEMA_VERSION);
    const changed: Rollout[][] = [];
    const added: SpanRange[][] = [];
    client.onNotification('rolloutsChanged', ({ rollouts }) => changed.push(rollouts));
    client.onNotification('spansAdded', ({ rollouts }) => added.push(rollouts));
    const rollout = await client.request('createRollout', { label: 'live' });
    await client.request('transitionRollout', { id: rollout.id, to: 'running' });
    const spans = Array.from({ length: 30 }, () => llmSpan());
    await Promise.all(spans.map((span) => client.request('addSpans', { rolloutId: rollout.id, spans: [span] })));
    await client.request('addReward', { rolloutId: rollout.id, value: 1 });
    const received = (): number =>
      added.flat().reduce((sum, range) => sum + range.toSequence - range.fromSequence + 1, 0);
    await waitFor(() => received() === 30 && changed.flat().some((r) => r.reward === 1), 'notifications');
    assert.ok(added.length < 30, `30 span writes must be batched into fewer notifications (got ${added.length})`);
    assert.ok(added.flat().every((range) => range.rolloutId === rollout.id));
    // A live view fetches what a notification announced, from what it already has.
    const first = added[0]![0]!;
    const page = await client.request('listSpans', { rolloutId: rollout.id, afterSequence: first.fromSequence - 1 });
    assert.deepEqual(
      page.items.map((s) => s.sequence),
      Array.from({ length: 30 - first.fromSequence + 1 }, (_, i) => first.fromSequence + i),
    );
    const tail = await client.request('listSpans', { rolloutId: rollout.id, afterSequence: 28, limit: 1 });
    assert.deepEqual(
      tail.items.map((s) => s.sequence),
      [29],
    );
    const latest = changed
      .flat()
      .filter((r) => r.id === rollout.id)
      .at(-1)!;
    assert.equal(latest.status, 'running');
    assert.equal(latest.spanCount, 30);
    assert.equal(latest.llmCalls, 30);
  });

  test("spans/list with slim: true cuts each resent conversation to its first and last turns (the editor tabs' spans), whole ones stay in the store", async (t) => {
    const { client } = await withDaemon(t);
    const rollout = await client.request('createRollout', { label: 'conversation' });
    const spans = agentRollout(12).map(({ rolloutId: _r, attempt: _a, sequence: _s, ...input }) => input);
    await client.request('addSpans', { rolloutId: rollout.id, spans });
    const messages = (span: { attributes: Record<string, unknown> }): unknown[] =>
      (span.attributes['lightning.request'] as { messages: unknown[] }).messages;
    const slim = (await client.request('listSpans', { rolloutId: rollout.id, slim: true })).items;
    const whole = (await client.request('listSpans', { rolloutId: rollout.id })).items;
    assert.equal(slim.length, whole.length);
    const [lastSlim, lastWhole] = [
      slim.filter((s) => s.category === 'llm').at(-1)!,
      whole.filter((s) => s.category === 'llm').at(-1)!,
    ];
    assert.ok(isSlim(lastSlim) && !isSlim(lastWhole));
    assert.equal(messages(lastWhole).length, 24);
    assert.deepEqual(messages(lastSlim), [messages(lastWhole)[0], ...messages(lastWhole).slice(-3)]);
    assert.deepEqual(
      slim.map((s) => [s.spanId, s.startMs, s.endMs, s.promptTokens]),
      whole.map((s) => [s.spanId, s.startMs, s.endMs, s.promptTokens]),
    );
  });

  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    test(`${signal}: exit 0, discovery files removed, the store consistent with every acknowledged write`, async (t) => {
      const { daemon, client, store } = await withDaemon(t);
      const rollout = await client.request('createRollout', {});
      const results = await client.request('addSpans', {
        rolloutId: rollout.id,
        spans: Array.from({ length: 100 }, () => llmSpan()),
      });
      assert.equal(results.results.filter((r) => r.kind === 'stored').length, 100);
      assert.equal(await daemon.stop(signal), 0);
      assert.ok(!fs.existsSync(path.join(path.dirname(store), 'daemon.json')));
      assert.ok(!fs.existsSync(path.join(path.dirname(store), 'daemon.token')));
      assert.ok(
        !fs.existsSync(`${store}-wal`) || fs.statSync(`${store}-wal`).size === 0,
        'the WAL is checkpointed on close',
      );
      const db = new BetterSqlite3(store, { readonly: true });
      t.after(() => db.close());
      assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
      assert.equal(
        (db.prepare('SELECT span_count FROM rollouts WHERE id = ?').get(rollout.id) as { span_count: number })
          .span_count,
        100,
      );
      assert.match(daemon.stderr(), /daemon stopped/);
    });

  test('a second daemon on the same store is refused with exit code 4; after a crash the store is reclaimed', async (t) => {
    const { daemon, store } = await withDaemon(t);
    await assert.rejects(startDaemon(store), /exited \(4\).*already owns/s);
    await daemon.stop('SIGKILL');
    assert.ok(
      fs.existsSync(path.join(path.dirname(store), 'daemon.json')),
      'a killed daemon leaves its discovery file',
    );
    const next = await startDaemon(store);
    t.after(() => next.stop('SIGKILL'));
    assert.notEqual(next.ready.pid, daemon.ready.pid);
  });
});

describe('daemon: spans/add over the RPC', () => {
  test('one bad span gets its own result naming the field; the good ones in the same call are stored', async (t) => {
    const { client } = await withDaemon(t);
    const rollout = await client.request('createRollout', {});
    const good = [llmSpan(), llmSpan()];
    const { results } = await client.request('addSpans', {
      rolloutId: rollout.id,
      spans: [good[0], { ...good[1], startMs: 'yesterday' }, good[1], good[0]],
    });
    assert.deepEqual(
      results.map((r) => r.kind),
      ['stored', 'invalid', 'stored', 'duplicate'],
    );
    assert.match((results[1] as { error: string }).error, /^spans\.1\.startMs: /);
    const detail = await client.request('getRollout', { id: rollout.id });
    assert.deepEqual(
      detail.spans.map((s) => s.spanId),
      [good[0]!.spanId, good[1]!.spanId],
    );
    await assert.rejects(
      client.request('addSpans', { rolloutId: 'ro-missing', spans: [{}] }),
      (error: unknown) => error instanceof DaemonError && error.kind === 'not_found',
    );
  });
});
