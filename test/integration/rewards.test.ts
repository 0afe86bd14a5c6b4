import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ScoreRolloutsResult, type Rollout } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { CLI, runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { recordRollout, recordRolloutRpc } from '../helpers/rewards';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const JUDGE_KEY = 'sk-judge-secret-0123456789';

interface Setup {
  readonly dir: string;
  readonly store: string;
  readonly daemon: RunningDaemon;
  readonly client: RpcClient;
}

async function setup(t: Parameters<typeof tempDir>[0]): Promise<Setup> {
  const dir = tempDir(t);
  const store = path.join(dir, '.lightning', 'store.db');
  const daemon = await startDaemon(store, ['--upstream', upstream.url]);
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  return { dir, store, daemon, client };
}

function writeConfig(setup: Setup, config: unknown): void {
  fs.writeFileSync(path.join(path.dirname(setup.store), 'rewards.json'), JSON.stringify(config));
}

async function judgeRollouts(client: RpcClient): Promise<Rollout[]> {
  const page = await client.request('listRollouts', { limit: 500 });
  return page.items.filter((r) => r.source.kind === 'api' && r.source.client === 'lightning-judge');
}

describe('automatic rewards through the daemon', () => {
  test('lightning score with an absolute LLM judge: malformed replies are asked for again, the judge’s calls are recorded, its key is never stored', async (t) => {
    const s = await setup(t);
    const id = await recordRolloutRpc(s.client, {
      answer: 'Paris',
      task: { id: 'capital', input: 'Capital of France?' },
    });
    writeConfig(s, {
      default: {
        sources: [
          {
            type: 'judge',
            model: 'scripted-judge',
            baseUrl: upstream.url,
            apiKeyEnv: 'JUDGE_KEY',
            rubric: 'Is the answer correct and concise?',
            maxRetries: 2,
          },
        ],
      },
    });
    upstream.script([
      'I think it is great!',
      '{"score": 1.5, "reason": "very good"}',
      '{"score": 0.8, "reason": "correct and concise"}',
    ]);
    const before = upstream.requests.length;
    const cli = await runCli(['score', '--store', s.store, '--json'], { env: { JUDGE_KEY } });
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stderr, /scored 1\/1/);
    const result = ScoreRolloutsResult.parse(JSON.parse(cli.stdout));
    assert.deepEqual([result.scored, result.errors], [1, 0]);

    const rewards = (await s.client.request('listRewards', { rolloutId: id })).items;
    assert.deepEqual(
      rewards.map((r) => [r.name, r.value, r.source, r.reason]),
      [
        ['judge', 0.8, 'judge', 'correct and concise'],
        ['reward', 0.8, 'judge', '1×judge(0.8)'],
      ],
    );
    // Three calls: the first reply was not JSON, the second out of range; each retry names the problem.
    const calls = upstream.requests.slice(before);
    assert.equal(calls.length, 3);
    assert.ok(calls.every((c) => c.headers.authorization === `Bearer ${JUDGE_KEY}`));
    const retry = calls[2]!.body!.messages as Array<{ role: string; content: string }>;
    assert.match(retry.at(-1)!.content, /not valid \(reply\.score: score must be between 0 and 1\)/);
    assert.match(
      retry[1]!.content,
      /Is the answer correct and concise\?[\s\S]*Capital of France\?[\s\S]*final answer: Paris/,
    );

    const judged = await judgeRollouts(s.client);
    assert.equal(judged.length, 1);
    assert.deepEqual([judged[0]!.mode, judged[0]!.status, judged[0]!.llmCalls], ['debug', 'succeeded', 3]);
    assert.match(judged[0]!.label!, new RegExp(`judge of ${id}`));
    // The judge's own rollouts are never scored: scoring again touches only the agent's rollout.
    upstream.script(['{"score": 0.6}']);
    const again = ScoreRolloutsResult.parse(
      JSON.parse((await runCli(['score', '--store', s.store, '--json'], { env: { JUDGE_KEY } })).stdout),
    );
    assert.deepEqual(
      again.results.map((r) => r.rolloutId),
      [id],
    );

    await s.daemon.stop();
    for (const file of fs.readdirSync(path.dirname(s.store))) {
      assert.ok(
        !fs.readFileSync(path.join(path.dirname(s.store), file)).includes(JUDGE_KEY),
        `${file} holds no API key`,
      );
    }
  });

  test('a relative (RULER) judge ranks the rollouts of one task together, over the RPC with progress notifications', async (t) => {
    const s = await setup(t);
    const ids = [];
    for (const answer of ['42', 'forty-two, I think', 'no idea'])
      ids.push(await recordRolloutRpc(s.client, { answer, task: { id: 'q1', input: '6*7?' } }));
    const lonely = await recordRolloutRpc(s.client, { answer: 'x', task: { id: 'q2', input: 'other' } });
    upstream.script([
      '{"scores": [{"id": 1, "score": 0.9, "reason": "exact"}, {"id": 3, "score": 0.1, "reason": "no answer"}]}',
      '{"scores": [{"id": 1, "score": 0.9, "reason": "exact"}, {"id": 2, "score": 0.6, "reason": "hedged"}, {"id": 3, "score": 0.1, "reason": "no answer"}]}',
    ]);
    const progress: number[] = [];
    s.client.onNotification('scoreProgress', (p) => p.jobId === 'job-1' && progress.push(p.done));
    const result = await s.client.request('scoreRollouts', {
      jobId: 'job-1',
      spec: { sources: [{ type: 'judge', model: 'scripted-ruler', rubric: 'Correctness first.', mode: 'relative' }] },
    });
    const byId = new Map(result.results.map((r) => [r.rolloutId, r]));
    assert.deepEqual(
      ids.map((id) => byId.get(id)!.value),
      [0.9, 0.6, 0.1],
    );
    assert.match(JSON.stringify(byId.get(ids[1]!)), /relative to 3 runs of the task: hedged/);
    assert.deepEqual(
      byId.get(lonely)!.sources.map((o) => o.kind),
      ['skipped'],
    );
    await waitFor(() => progress.includes(4), 'a progress notification for all 4 rollouts');
    // One judge call asked twice (the first reply missed run 2), recorded as one judge rollout.
    const judged = await judgeRollouts(s.client);
    assert.deepEqual(
      judged.map((r) => r.llmCalls),
      [2],
    );
    assert.deepEqual(await s.client.request('cancelScore', { jobId: 'job-1' }), { cancelled: false });
  });

  test('scoring one rollout at a time (as a runner does after each rollout) reuses the daemon’s prepared scorer', async (t) => {
    const s = await setup(t);
    const spec = {
      sources: [
        {
          type: 'function' as const,
          module: path.join(__dirname, '..', 'fixtures', 'rewards', 'functions', 'counter.mjs'),
        },
      ],
    };
    const values = [];
    for (let i = 0; i < 3; i += 1) {
      const id = await recordRolloutRpc(s.client, { answer: `a${i}` });
      values.push((await s.client.request('scoreRollouts', { spec, rollouts: [id] })).results[0]!.value);
    }
    // One worker scored all three: the module's counter kept counting.
    assert.deepEqual(values, [1, 2, 3]);
  });

  test('Ctrl-C stops lightning score after the current chunk (no daemon running: the command starts its own)', async (t) => {
    const dir = tempDir(t);
    const storeFile = path.join(dir, '.lightning', 'store.db');
    fs.mkdirSync(path.dirname(storeFile), { recursive: true });
    const store = Store.open(storeFile);
    for (let i = 0; i < 600; i += 1) recordRollout(store, { answer: String(i) });
    store.close();
    fs.writeFileSync(
      path.join(dir, '.lightning', 'rewards.json'),
      JSON.stringify({
        default: {
          sources: [
            { type: 'function', module: path.join(__dirname, '..', 'fixtures', 'rewards', 'functions', 'slow.mjs') },
          ],
        },
      }),
    );
    const child = spawn(process.execPath, [CLI, 'score', '--json'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk.toString()));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    await waitFor(() => stderr.includes('scored 256/600'), 'the first chunk', 60_000);
    child.kill('SIGINT');
    assert.equal(await exited, 130, stderr);
    assert.match(stderr, /cancelling after the current chunk/);
    const result = ScoreRolloutsResult.parse(JSON.parse(stdout));
    assert.equal(result.cancelled, true);
    assert.ok(result.scored >= 256 && result.scored < 600, `scored ${result.scored}`);
    const reopened = Store.open(storeFile);
    t.after(() => reopened.close());
    assert.equal(reopened.stats().rewards, result.scored * 2, 'what was scored is kept');
  });

  test('bad input: a bad config or an unknown rollout is a clear error and writes nothing', async (t) => {
    const s = await setup(t);
    await recordRolloutRpc(s.client, { answer: 'x' });
    writeConfig(s, { default: { sources: [{ type: 'rule', rule: { rule: 'numeric', absTol: 'small' } }] } });
    const bad = await runCli(['score', '--store', s.store]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /rewards\.json: default\.sources\.0\.rule\.absTol/);
    const rpcError = await s.client
      .requestRaw('lightning/rewards/score', { spec: { sources: [{ type: 'rule', rule: { rule: 'tool-called' } }] } })
      .catch((e: { code: number; message: string }) => e);
    assert.equal((rpcError as { code: number }).code, -32602);
    assert.match((rpcError as { message: string }).message, /params\.spec\.sources\.0\.rule\.tool/);
    writeConfig(s, { default: { sources: [{ type: 'rule', rule: { rule: 'exact' } }] } });
    const missing = await runCli(['score', '--store', s.store, '--rollouts', 'ro-doesnotexist']);
    assert.equal(missing.code, 3);
    assert.match(missing.stderr, /rollout ro-doesnotexist does not exist/);
    assert.equal((await s.client.request('getStats', {})).rewards, 0);
    // A judge whose model fails: the error is that rollout's, and the judge's rollout is marked failed.
    const failing = await s.client.request('scoreRollouts', {
      spec: { sources: [{ type: 'judge', model: 'fail-500', rubric: 'r', maxRetries: 0 }] },
    });
    assert.deepEqual([failing.scored, failing.unscored, failing.errors], [0, 1, 1]);
    assert.match(JSON.stringify(failing.results[0]!.sources[0]), /the judge model answered HTTP 500/);
    assert.deepEqual(
      (await judgeRollouts(s.client)).map((r) => r.status),
      ['failed'],
    );
    assert.equal((await s.client.request('getStats', {})).rewards, 0);
  });
});
