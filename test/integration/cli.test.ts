import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { Reward, RolloutDetail, RolloutPage } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { runCli, startDaemon } from '../helpers/daemon';
import { llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

type Seed = (label: string) => Promise<string>;

/** The same CLI checks, once against a running daemon (RPC) and once against the store file alone. */
const backends: Array<[string, (t: Parameters<typeof tempDir>[0]) => Promise<{ cwd: string; seed: Seed }>]> = [
  [
    'against the running daemon',
    async (t) => {
      const cwd = tempDir(t);
      const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'));
      t.after(() => daemon.stop('SIGKILL'));
      const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
      t.after(() => client.dispose());
      return {
        cwd,
        seed: async (label) => {
          const rollout = await client.request('createRollout', {
            label,
            task: { id: `task-${label}`, input: { q: label } },
          });
          await client.request('transitionRollout', { id: rollout.id, to: 'running' });
          await client.request('addSpans', { rolloutId: rollout.id, spans: [llmSpan({ name: `chat ${label}` })] });
          await client.request('transitionRollout', { id: rollout.id, to: 'succeeded', exitCode: 0 });
          return rollout.id;
        },
      };
    },
  ],
  [
    'against the store directly (no daemon)',
    async (t) => {
      const cwd = tempDir(t);
      return {
        cwd,
        seed: async (label) => {
          const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
          try {
            const rollout = store.createRollout(
              parsed('createRollout', { label, task: { id: `task-${label}`, input: { q: label } } }),
            );
            store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'running' }));
            store.addSpans({ rolloutId: rollout.id, spans: [llmSpan({ name: `chat ${label}` })] });
            store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'succeeded', exitCode: 0 }));
            return rollout.id;
          } finally {
            store.close();
          }
        },
      };
    },
  ],
];

for (const [name, setUp] of backends) {
  describe(`lightning CLI ${name}`, () => {
    test('rollouts lists newest first, filters, and prints schema-valid JSON', async (t) => {
      const { cwd, seed } = await setUp(t);
      const first = await seed('alpha');
      const second = await seed('beta');
      const text = await runCli(['rollouts'], { cwd });
      assert.equal(text.code, 0, text.stderr);
      const lines = text.stdout.trim().split('\n');
      assert.match(lines[0]!, /^ID\s+STATUS\s+MODE\s+LABEL\s+REWARD\s+LLM\s+TOKENS\s+DURATION\s+CREATED$/);
      assert.ok(lines[1]!.startsWith(second) && lines[2]!.startsWith(first), text.stdout);
      assert.match(lines[1]!, /succeeded\s+debug\s+beta\s+-\s+1\s+25\s/);

      const json = await runCli(['rollouts', '--json', '--search', 'alph'], { cwd });
      assert.equal(json.code, 0, json.stderr);
      const page = RolloutPage.parse(JSON.parse(json.stdout));
      assert.deepEqual(
        page.items.map((r) => r.id),
        [first],
      );

      const paged = RolloutPage.parse(
        JSON.parse((await runCli(['rollouts', '--json', '--limit', '1'], { cwd })).stdout),
      );
      assert.deepEqual(
        paged.items.map((r) => r.id),
        [second],
      );
      const next = RolloutPage.parse(
        JSON.parse(
          (await runCli(['rollouts', '--json', '--limit', '1', '--cursor', paged.nextCursor!], { cwd })).stdout,
        ),
      );
      assert.deepEqual(
        next.items.map((r) => r.id),
        [first],
      );
      assert.equal(next.nextCursor, null);

      const none = await runCli(['rollouts', '--status', 'failed,timeout'], { cwd });
      assert.equal(none.stdout.trim(), 'No rollouts match.');
    });

    test('reward appends an annotation that show then displays; a correction is a new row', async (t) => {
      const { cwd, seed } = await setUp(t);
      const id = await seed('gamma');
      const first = await runCli(['reward', id.slice(0, 8), '1', '--comment', 'right answer', '--author', 'ana'], {
        cwd,
      });
      assert.equal(first.code, 0, first.stderr);
      assert.match(first.stdout, new RegExp(`Recorded reward = 1 on ${id}`));
      const fix = await runCli(['reward', id, '0.25', '--name', 'reward', '--json'], { cwd });
      assert.equal(fix.code, 0, fix.stderr);
      assert.equal(Reward.parse(JSON.parse(fix.stdout)).value, 0.25);

      const show = await runCli(['show', id], { cwd });
      assert.equal(show.code, 0, show.stderr);
      assert.match(show.stdout, /reward\s+0\.25/);
      assert.match(show.stdout, /1\s+llm\s+chat gamma/);
      assert.match(show.stdout, /right answer/);
      const detail = RolloutDetail.parse(JSON.parse((await runCli(['show', id, '--json'], { cwd })).stdout));
      assert.deepEqual(
        detail.rewards.map((r) => [r.value, r.source, r.author]),
        [
          [1, 'human', 'ana'],
          [0.25, 'human', process.env.USER ?? null],
        ],
      );
      assert.equal(detail.spans.length, 1);
    });

    test('dataset import then list; a bad file names its line and imports nothing', async (t) => {
      const { cwd, seed } = await setUp(t);
      await seed('zeta');
      fs.writeFileSync(
        path.join(cwd, 'math.jsonl'),
        '{"id":"a","q":"2+2","expected":4}\n{"id":"b","q":"3+3","expected":6,"split":"val"}\n',
      );
      const imported = await runCli(['dataset', 'import', 'math.jsonl'], { cwd });
      assert.equal(imported.code, 0, imported.stderr);
      assert.match(imported.stdout, /Imported 2 tasks as dataset math \(ds-[0-9a-f]+\): 1 train, 1 val\./);
      fs.writeFileSync(path.join(cwd, 'broken.jsonl'), '{"id":"a"}\n{not json\n');
      const broken = await runCli(['dataset', 'import', 'broken.jsonl'], { cwd });
      assert.equal(broken.code, 2);
      assert.match(broken.stderr, /broken\.jsonl: line 2: not valid JSON/);
      const listed = JSON.parse((await runCli(['dataset', 'list', '--json'], { cwd })).stdout) as {
        items: Array<{ name: string; taskCount: number }>;
      };
      assert.deepEqual(
        listed.items.map((d) => [d.name, d.taskCount]),
        [['math', 2]],
      );
    });

    test('exit codes mean something: 3 not found, 2 bad input', async (t) => {
      const { cwd, seed } = await setUp(t);
      const id = await seed('delta');
      const missing = await runCli(['show', 'ro-ffffffffffffffff'], { cwd });
      assert.equal(missing.code, 3);
      assert.match(missing.stderr, /rollout ro-ffffffffffffffff does not exist/);
      const notNumber = await runCli(['reward', id, 'great'], { cwd });
      assert.equal(notNumber.code, 2);
      assert.match(notNumber.stderr, /"great" is not a finite decimal number/);
      for (const typo of ['0x10', '1e309', ''])
        assert.equal((await runCli(['reward', id, typo], { cwd })).code, 2, `${typo} is no reward`);
      const badSpan = await runCli(['reward', id, '1', '--span', 'abc'], { cwd });
      assert.equal(badSpan.code, 2);
      assert.match(badSpan.stderr, /params\.spanId/);
      const badStatus = await runCli(['rollouts', '--status', 'done'], { cwd });
      assert.equal(badStatus.code, 2);
      const unknown = await runCli(['rollouts', '--frobnicate'], { cwd });
      assert.equal(unknown.code, 2);
      assert.match(unknown.stderr, /unknown option '--frobnicate'/);
      const detail = RolloutDetail.parse(JSON.parse((await runCli(['show', id, '--json'], { cwd })).stdout));
      assert.deepEqual(detail.rewards, [], 'failed commands wrote nothing');
    });
  });
}

describe('lightning CLI without a store', () => {
  test('commands explain how to get a store; --help documents every command and the exit codes', async (t) => {
    const cwd = tempDir(t);
    const list = await runCli(['rollouts'], { cwd });
    assert.equal(list.code, 3);
    assert.match(list.stderr, /no store at .*lightning serve/);
    const help = await runCli(['--help'], { cwd });
    assert.equal(help.code, 0);
    for (const command of ['serve', 'run', 'rollouts', 'show', 'reward', 'demo']) {
      assert.match(help.stdout, new RegExp(`^  ${command}\\b`, 'm'));
      const sub = await runCli([command, '--help'], { cwd });
      assert.equal(sub.code, 0, `${command} --help`);
      assert.match(sub.stdout, new RegExp(`Usage: lightning ${command}`));
      assert.match(sub.stdout, /Exit codes:/);
    }
    const badHost = await runCli(['serve', '--host', '0.0.0.0', '--store', path.join(cwd, 's.db')], { cwd });
    assert.equal(badHost.code, 2);
    assert.match(badHost.stderr, /name one address .* not every interface/);
  });
});
