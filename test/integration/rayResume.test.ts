// needs: ray
/**
 * `dataset run --ray` when the runner itself dies (kill -9): the Ray driver sees its stdin close and cancels the
 * tasks, so the agents on the node stop; `--resume BATCH --ray` then retries the interrupted attempts on the
 * cluster and finishes the batch. Needs LIGHTNING_TEST_PYTHON with ray.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { CLI, runCli } from '../helpers/daemon';
import { batchOf } from '../helpers/batch';
import { rayFixture } from '../helpers/ray';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';

/** Hangs on its first attempt (recording its pid), then makes one call and succeeds. */
const AGENT = `
import json, os, time, urllib.request
task = json.loads(os.environ['LIGHTNING_TASK'])
marker = os.path.join(os.getcwd(), 'hung-' + task['name'])
if not os.path.exists(marker):
    open(marker, 'w').write(str(os.getpid()))
    time.sleep(600)
req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=json.dumps({'model': 'gpt-test', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(), method='POST', headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})
urllib.request.urlopen(req, timeout=30).read()
`;

const ray = rayFixture();

before(() => ray.start());
after(() => ray.stop());

test('dataset run --ray: a runner killed with -9 leaves no agent running on the node; --resume --ray finishes the batch', async (t) => {
  const { python, head } = ray;
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.py'), AGENT);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), ['a', 'b'].map((id) => JSON.stringify({ id, name: id })).join('\n'));
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  assert.equal((await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd })).code, 0);
  const env = { OPENAI_BASE_URL: '', OPENAI_API_BASE: '', LIGHTNING_RAY_PYTHON: python };
  const args = [
    'dataset',
    'run',
    'tasks',
    '--concurrency',
    '2',
    '--retries',
    '1',
    '--upstream',
    upstream.url,
    '--ray',
    head.address,
    '--json',
  ];
  const runner = spawn(process.execPath, [CLI, ...args, '--', python, 'agent.py'], {
    cwd,
    env: { ...process.env, ...env },
    stdio: 'ignore',
  });
  const pids = await waitFor(
    () => {
      const found = ['a', 'b']
        .map((id) => path.join(cwd, `hung-${id}`))
        .filter((file) => fs.existsSync(file) && fs.readFileSync(file, 'utf8') !== '');
      return found.length === 2 ? found.map((file) => Number(fs.readFileSync(file, 'utf8'))) : null;
    },
    'both agents to hang on the node',
    90_000,
  );
  const gone = new Promise((resolve) => runner.once('exit', resolve));
  runner.kill('SIGKILL');
  await gone;
  await waitFor(
    () => pids.every((pid) => !isProcessAlive(pid)),
    'the Ray driver to cancel the agents of the dead runner',
    30_000,
  );
  const batchId = batchOf(cwd)[0]!.batchId!;
  assert.deepEqual(
    batchOf(cwd).map((r) => r.status),
    ['running', 'running'],
  );

  const resumed = await runCli([...args, '--resume', batchId, '--', python, 'agent.py'], { cwd, env });
  assert.equal(resumed.code, 0, resumed.stderr);
  const rollouts = batchOf(cwd);
  assert.deepEqual(
    rollouts.map((r) => [r.status, r.attemptCount, r.llmCalls]),
    [
      ['succeeded', 2, 1],
      ['succeeded', 2, 1],
    ],
  );
});
