import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Transition } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

test('npm run demo records the sample agent offline: six rollouts, their LLM calls, agent and human rewards', async (t) => {
  const cwd = tempDir(t);
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'demo.js')], {
    cwd,
    env: { ...process.env, OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', OPENAI_API_KEY: 'sk-should-not-be-used-0123456789' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, out);
  assert.match(out, /What is 23 minus 45\? → The answer is -22\. \(right\)/);
  assert.match(out, /Recorded 6 rollouts \(12 LLM calls/);

  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  t.after(() => store.close());
  const rollouts = store.listRollouts({ order: 'oldest' }).items;
  assert.deepEqual(rollouts.map((r) => [r.task?.id, r.status, r.llmCalls, r.reward]), [
    ['add-1', 'succeeded', 2, 1], ['sub-1', 'succeeded', 2, 1], ['mul-1', 'succeeded', 2, 1],
    ['add-2', 'succeeded', 2, 1], ['sub-2', 'succeeded', 2, 1], ['mul-2', 'succeeded', 2, 1],
  ]);
  const rewards = store.listRewards(rollouts[0]!.id);
  assert.deepEqual(rewards.map((r) => r.source), ['agent', 'human']);
  const spans = store.getRolloutDetail(rollouts[1]!.id).spans;
  assert.equal(spans[0]!.attributes['gen_ai.response.model'], 'lightning-demo-rules-v1');

  // The recorded rollouts become training data.
  const file = path.join(cwd, 'transitions.jsonl');
  const exported = await runCli(['export', '--out', file], { cwd });
  assert.equal(exported.code, 0, exported.stderr);
  const summary = JSON.parse(exported.stdout) as { transitions: number; exported: number; singletonGroups: number };
  assert.deepEqual([summary.exported, summary.transitions, summary.singletonGroups], [6, 12, 6]);
  const lines = fs.readFileSync(file, 'utf8').trim().split('\n').map((line) => Transition.parse(JSON.parse(line)));
  assert.deepEqual(lines.map((l) => l.step), [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
  assert.ok(lines.every((l) => l.reward === 1 && l.advantage === 0), 'one rollout per task: GRPO has nothing to compare');
  const chat = path.join(cwd, 'chat.jsonl');
  assert.equal((await runCli(['export', '--format', 'chat', '--out', chat, '--min-reward', '1'], { cwd })).code, 0);
  const example = JSON.parse(fs.readFileSync(chat, 'utf8').split('\n')[1]!) as { messages: Array<{ role: string; content: string | null }> };
  assert.deepEqual(example.messages.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'assistant']);
  assert.equal(example.messages.at(-1)!.content, 'The answer is 68.');
  const bad = await runCli(['export', '--out', path.join(cwd, 'x.jsonl'), '--agent', '(unclosed'], { cwd });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--agent \(unclosed: not a regular expression/);
  assert.ok(!fs.existsSync(path.join(cwd, 'x.jsonl')), 'a failed export writes nothing');
  assert.deepEqual(fs.readdirSync(cwd).filter((name) => name.endsWith('.tmp')), []);
});
