/**
 * What reaches the store and the disk, against a real daemon: no span without a credential or into
 * a finished rollout, no gzip bomb that makes a rollout unreadable, no secret in any free-text
 * field, private file modes, exports that never replace a device or follow a symlink, and files
 * named over RPC that cannot stall the daemon or leak their content.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import type { DaemonError } from '../../trainer-daemon/protocol/errors';
import { AgentPidLog } from '../../trainer-daemon/runner/agentPids';
import { Store } from '../../trainer-daemon/store/store';
import { runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';
import { post } from '../helpers/http';

let counter = 0;
/** One OTLP/JSON span; `rolloutId` goes in the resource, as OTEL_RESOURCE_ATTRIBUTES puts it. */
function otlpJson(
  rolloutId: string,
  span: { name?: string; attributes?: Record<string, string>; status?: string; event?: string } = {},
): string {
  counter += 1;
  const attrs = (record: Record<string, string>) =>
    Object.entries(record).map(([key, value]) => ({ key, value: { stringValue: value } }));
  return JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes: attrs({ 'lightning.rollout_id': rolloutId }) },
        scopeSpans: [
          {
            spans: [
              {
                traceId: '0af7651916cd43dd8448eb211c80319c',
                spanId: `a${counter.toString(16).padStart(15, '0')}`,
                name: span.name ?? 'chat m',
                kind: 3,
                startTimeUnixNano: '1700000000000000000',
                endTimeUnixNano: '1700000000100000000',
                attributes: attrs({ 'gen_ai.operation.name': 'chat', ...span.attributes }),
                events: span.event ? [{ name: span.event, timeUnixNano: '1700000000050000000', attributes: [] }] : [],
                status: span.status ? { code: 2, message: span.status } : {},
              },
            ],
          },
        ],
      },
    ],
  });
}

const JSON_TYPE = { 'content-type': 'application/json' };

describe('the store takes only credentialed, bounded, scrubbed writes', () => {
  let daemon: RunningDaemon;
  let client: RpcClient;
  let dir: string;
  const cleanups: Array<() => void> = [];
  before(async () => {
    dir = tempDir({ after: (fn) => cleanups.push(fn) });
    daemon = await startDaemon(path.join(dir, '.lightning', 'store.db'));
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    for (const cleanup of cleanups) cleanup();
  });

  test('the shared POST /v1/traces writes nothing without a credential, and never into a finished rollout', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const keyless = await post(`${daemon.ready.url}/v1/traces`, otlpJson(rollout.id), JSON_TYPE);
    assert.equal(keyless.status, 401, keyless.body);
    assert.match(keyless.body, /needs a credential/);
    const wrongKey = await post(`${daemon.ready.url}/v1/traces`, otlpJson(rollout.id), {
      ...JSON_TYPE,
      'x-lightning-rollout-key': 'A'.repeat(32),
    });
    assert.equal(wrongKey.status, 401);
    const withKey = await post(`${daemon.ready.url}/v1/traces`, otlpJson(rollout.id), {
      ...JSON_TYPE,
      'x-lightning-rollout-key': url.split('/r/')[1]!,
    });
    assert.equal(withKey.status, 200, withKey.body);
    assert.equal((await client.request('getRollout', { id: rollout.id })).spans.length, 1);
    await client.request('transitionRollout', { id: rollout.id, to: 'succeeded' });
    const late = await post(`${daemon.ready.url}/v1/traces`, otlpJson(rollout.id, { name: 'injected' }), {
      ...JSON_TYPE,
      authorization: `Bearer ${daemon.ready.token}`,
    });
    assert.equal(late.status, 200);
    assert.match(late.body, /has finished \(succeeded\)/);
    assert.equal(
      (await client.request('getRollout', { id: rollout.id })).spans.length,
      1,
      'nothing was added to the finished rollout',
    );
  });

  test('a gzip bomb (16 MiB attribute in a small body) is stored cut to size and the rollout stays readable', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const body = zlib.gzipSync(otlpJson(rollout.id, { attributes: { 'gen_ai.prompt': 'a'.repeat(16 * 1024 * 1024) } }));
    assert.ok(body.length < 100 * 1024, `${body.length} bytes on the wire`);
    for (let i = 0; i < 3; i += 1) {
      const response = await post(
        `${url}/v1/traces`,
        zlib.gzipSync(otlpJson(rollout.id, { attributes: { 'gen_ai.prompt': 'a'.repeat(16 * 1024 * 1024) } })),
        { ...JSON_TYPE, 'content-encoding': 'gzip' },
      );
      assert.equal(response.status, 200, response.body);
    }
    const detail = await client.request('getRollout', { id: rollout.id });
    assert.equal(detail.spans.length, 3);
    const kept = String(detail.spans[0]!.attributes['gen_ai.prompt']);
    assert.ok(kept.length < 1.1 * 1024 * 1024, `${kept.length} characters kept`);
    assert.match(kept, /truncated 15728640 characters\]$/);
  });

  test('secrets in OTLP span names, status messages and event names, and in spans/add attributes, are not stored', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const key = 'sk-proj-abcdefghijklmnop0123';
    const hf = 'hf_abcdefghijklmnopqrstuvwxyz012345';
    const response = await post(
      `${url}/v1/traces`,
      otlpJson(rollout.id, {
        name: `call with ${key}`,
        status: `denied x-api-key: plainvalue123 ${hf}`,
        event: `retry ${key}`,
      }),
      JSON_TYPE,
    );
    assert.equal(response.status, 200, response.body);
    await client.request('addSpans', {
      rolloutId: rollout.id,
      spans: [
        {
          traceId: '0af7651916cd43dd8448eb211c80319c',
          spanId: 'aaaaaaaaaaaaaaaa',
          name: 'tool',
          category: 'tool',
          startMs: 1,
          endMs: 2,
          attributes: { args: `--token ${key}`, nested: { api_key: 'gsk_abcdefghijklmnopqrstuvwx', note: hf } },
        },
      ],
    });
    const stored = JSON.stringify((await client.request('getRollout', { id: rollout.id })).spans);
    for (const secret of [key, hf, 'plainvalue123', 'gsk_abcdefghijklmnopqrstuvwx'])
      assert.ok(!stored.includes(secret), `${secret} was stored: ${stored}`);
    assert.match(stored, /call with \[redacted\]/);
  });

  test('the store, its WAL and its folder are private (0600 / 0700)', async () => {
    const { url } = await client.request('startAgentRun', {});
    await post(`${url}/v1/traces`, otlpJson('x'), JSON_TYPE);
    const store = path.join(dir, '.lightning', 'store.db');
    assert.equal(fs.statSync(path.dirname(store)).mode & 0o777, 0o700);
    for (const file of [store, `${store}-wal`]) assert.equal(fs.statSync(file).mode & 0o777, 0o600, file);
  });

  test('rewards/score with /dev/zero or a non-JSON file answers at once with an error that quotes nothing', async () => {
    const started = Date.now();
    await assert.rejects(
      client.request('scoreRollouts', { rewardsFile: '/dev/zero', rollouts: ['ro-x'] }),
      (error: DaemonError) => /not a regular file/.test(error.message) && error.code === -32602,
    );
    const secretFile = path.join(dir, 'passwd');
    fs.writeFileSync(secretFile, 'root:x:0:0:hunter2:/root:/bin/bash\n');
    await assert.rejects(
      client.request('scoreRollouts', { rewardsFile: secretFile, rollouts: ['ro-x'] }),
      (error: DaemonError) => {
        assert.match(error.message, /not valid JSON/);
        assert.doesNotMatch(error.message, /root|hunter2/);
        return true;
      },
    );
    assert.ok(Date.now() - started < 5_000, 'no stall');
    assert.equal((await client.request('getStats', {})).schemaVersion > 0, true, 'still serving');
  });
});

test('lightning export refuses a FIFO, a symlink, a device or a missing folder as --out, leaves no .tmp, and writes 0600', async (t) => {
  const cwd = tempDir(t);
  Store.open(path.join(cwd, '.lightning', 'store.db')).close();
  const fifo = path.join(cwd, 'fifo');
  execFileSync('mkfifo', [fifo]);
  const target = path.join(cwd, 'target.txt');
  fs.writeFileSync(target, 'keep me');
  const link = path.join(cwd, 'link.jsonl');
  fs.symlinkSync(target, link);
  for (const [out, why] of [
    [fifo, /not a regular file/],
    [link, /symbolic link/],
    ['/dev/null', /not a regular file/],
  ] as const) {
    const result = await runCli(['export', '--out', out], { cwd });
    assert.notEqual(result.code, 0, `${out}: ${result.stdout}`);
    assert.match(result.stderr, why);
  }
  // A folder that does not exist: bad input (exit 2) naming the folder, not an error about a temporary file.
  const missing = await runCli(['export', '--out', path.join(cwd, 'nowhere', 'x.jsonl')], { cwd });
  assert.equal(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, /the folder .*nowhere does not exist; create it first/);
  assert.doesNotMatch(missing.stderr, /\.tmp/);
  assert.equal(fs.readFileSync(target, 'utf8'), 'keep me');
  assert.ok(
    fs.lstatSync(fifo).isFIFO() && fs.lstatSync(link).isSymbolicLink() && fs.statSync('/dev/null').isCharacterDevice(),
  );
  assert.deepEqual(
    fs.readdirSync(cwd).filter((name) => name.endsWith('.tmp')),
    [],
  );
  const out = path.join(cwd, 'out.jsonl');
  const ok = await runCli(['export', '--out', out], { cwd });
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(fs.statSync(out).mode & 0o777, 0o600);
});

test("agents.jsonl keeps no agent's command line (a digest), is 0600, and still stops the survivors", async (t) => {
  const dir = tempDir(t);
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', '--', '--api-key=hunter2-agent-secret'], {
    detached: true,
    stdio: 'ignore',
  });
  t.after(() => child.kill('SIGKILL'));
  const log = new AgentPidLog(path.join(dir, 'agents.jsonl'));
  await new Promise((resolve) => child.once('spawn', resolve));
  log.record(child.pid!);
  const text = fs.readFileSync(path.join(dir, 'agents.jsonl'), 'utf8');
  assert.doesNotMatch(text, /hunter2|api-key/);
  assert.equal(fs.statSync(path.join(dir, 'agents.jsonl')).mode & 0o777, 0o600);
  assert.equal(await log.stopSurvivors(200), 1);
});
