/**
 * The e2e workspace for training from the editor: a launch configuration for the digits agent (its reward varies
 * from sample to sample even for the untrained policy, so every iteration updates) and a 3 train + 2 val task
 * dataset of the demo's tools task, imported before the editor opens.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { runCli } from './daemon';

export const TRAINING_AGENT = 'Digits agent';

export async function prepareTrainingWorkspace(workspace: string, storeFile: string): Promise<void> {
  const launchFile = path.join(workspace, '.vscode', 'launch.json');
  const launch = JSON.parse(fs.readFileSync(launchFile, 'utf8')) as { configurations: unknown[] };
  launch.configurations.push({
    type: 'node',
    request: 'launch',
    name: TRAINING_AGENT,
    program: '${workspaceFolder}/digits-agent.mjs',
    env: { AGENT_MODEL: 'tools-policy' },
  });
  fs.writeFileSync(launchFile, JSON.stringify(launch, null, 2));
  const tasksFile = path.join(workspace, 'tools.jsonl');
  fs.writeFileSync(
    tasksFile,
    toolsTasks(3, 2)
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const imported = await runCli(['dataset', 'import', tasksFile, '--name', 'tools', '--store', storeFile]);
  assert.equal(imported.code, 0, imported.stderr);
}
