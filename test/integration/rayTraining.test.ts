/**
 * `lightning train --ray ADDRESS`: a GRPO run whose agents (worker mode) run as Ray tasks on a real local Ray head,
 * their calls served by the trainer worker's policy through the daemon. Needs LIGHTNING_TEST_PYTHON with ray.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { rayFixture } from '../helpers/ray';
import { tempDir } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'parity-worker.mjs');
const ray = rayFixture();

before(() => ray.start());
after(() => ray.stop());

test('train --ray: the agents run as Ray tasks, every iteration updates, train --list says where, the logs name the node', async (t) => {
  const { python, head } = ray;
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), toolsTasks(8, 4).map((task) => JSON.stringify(task)).join('\n'));
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'tools'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  const run = await runCli(['train', '--model', 'tiny', '--dataset', 'tools', '--iterations', '1', '--samples', '4', '--tasks-per-iteration', '4', '--eval-every', '10',
    '--agent-mode', 'worker', '--workers', '2', '--per-worker', '8', '--device', 'cpu', '--python', '/usr/bin/python3', '--ray', head.address, '--ray-python', python, '--json', '--', process.execPath, AGENT], { cwd, env: { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' } });
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, new RegExp(`agents on Ray ${head.address.replace(/\./g, '\\.')}`));
  const finished = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { run: { id: string; status: string }; checkpoints: Array<{ step: number; metrics: Record<string, number> }> };
  assert.equal(finished.run.status, 'succeeded');
  assert.ok(finished.checkpoints.filter((c) => c.step > 0).every((c) => c.metrics.loss !== undefined && c.metrics.transitions > 0), JSON.stringify(finished.checkpoints));
  const list = await runCli(['train', '--list'], { cwd });
  assert.match(list.stdout, new RegExp(`${finished.run.id}\\s+grpo\\s+succeeded\\s+1\\s+\\S+\\s+\\S+\\s+agents on Ray 127\\.0\\.0\\.1:\\d+`));
  const logs = path.join(cwd, '.lightning', 'logs', finished.run.id);
  const workerLogs = fs.readdirSync(logs, { recursive: true, encoding: 'utf8' }).filter((file) => /worker-w\d+\.log$/.test(file));
  assert.ok(workerLogs.some((file) => file.includes('-train-0')), workerLogs.join(', '));
  for (const file of workerLogs) assert.match(fs.readFileSync(path.join(logs, file), 'utf8'), /^\[lightning\] running on Ray node \S+ \(.+\), node id [0-9a-f]+\n/, file);
});
