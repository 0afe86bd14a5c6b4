/**
 * One launch.json, one command: Run Dataset, Start Training and Optimize This Prompt pick their agent
 * through `extension/pickers.ts`, which converts every configuration with `agentChoices` (the one
 * converter, `extension/debug/launchCommand.ts`). These tests run a launch.json through that path —
 * Node with only runtimeArgs, Python with pythonPath, an envFile, a relative cwd, `${cwd}` and
 * `${pathSeparator}` — and hold that the three commands have no other.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { agentChoices, type CommandContext } from '../../extension/debug/launchCommand';
import type { LaunchConfig } from '../../extension/debug/launchConfig';
import { importGraph } from '../helpers/importGraph';
import { tempDir } from '../helpers/tmp';

const root = path.resolve(__dirname, '../..');
const COMMANDS = [
  'extension/datasets/datasetCommands.ts',
  'extension/training/startTraining.ts',
  'extension/apo/optimizePrompt.ts',
];

describe('one launch-config converter for the three commands', () => {
  it('converts Node, Python, envFile, a relative cwd and the variables the same way for every command', (t) => {
    const folder = tempDir(t);
    fs.writeFileSync(
      path.join(folder, '.env'),
      "# the agent's keys\nexport MODEL=\"m-2\"\nEMPTY=\nQUOTED='a b'\nA=from-file\n",
    );
    const context: CommandContext = {
      workspaceFolder: folder,
      home: '/home/me',
      processEnv: { PYBIN: '/opt/py/bin/python' },
    };
    const launchJson: LaunchConfig[] = [
      {
        type: 'node',
        request: 'launch',
        name: 'Node',
        runtimeArgs: ['--import', 'tsx', '${cwd}${pathSeparator}agent.ts'],
        cwd: 'agents',
        envFile: '${workspaceFolder}/.env',
        env: { A: 'from-env' },
      },
      {
        type: 'debugpy',
        request: 'launch',
        name: 'Python',
        program: 'agent.py',
        pythonPath: '${env:PYBIN}',
        cwd: '${workspaceFolder}',
      },
      { type: 'node', request: 'attach', name: 'Attach' },
    ];
    const choices = agentChoices(launchJson, context);
    assert.deepEqual(
      choices.map((c) => c.config.name),
      ['Node', 'Python'],
      'attach configurations are not offered',
    );
    assert.deepEqual(choices[0]!.result, {
      ok: true,
      command: {
        argv: ['node', '--import', 'tsx', `${folder}${path.sep}agent.ts`],
        cwd: path.join(folder, 'agents'),
        env: { MODEL: 'm-2', EMPTY: '', QUOTED: 'a b', A: 'from-env' },
        notes: [],
      },
    });
    assert.deepEqual(choices[1]!.result, {
      ok: true,
      command: { argv: ['/opt/py/bin/python', 'agent.py'], cwd: folder, env: {}, notes: [] },
    });
  });

  it('Run Dataset, Start Training and Optimize This Prompt pick their agent only through the shared pickers', () => {
    const graph = importGraph(root);
    for (const file of COMMANDS) {
      assert.ok(graph.get(file)?.includes('extension/pickers.ts'), `${file} uses extension/pickers.ts`);
      assert.doesNotMatch(
        fs.readFileSync(path.join(root, file), 'utf8'),
        /launchToCommand\(|agentChoices\(|showQuickPick\(configurations/,
        `${file} converts no configuration itself`,
      );
      assert.match(
        fs.readFileSync(path.join(root, file), 'utf8'),
        /pickAgent\(choices/,
        `${file} asks for the agent with pickAgent`,
      );
    }
    const converters = [...graph.keys()].filter(
      (file) =>
        file.startsWith('extension/') && /\blaunchToCommand\(/.test(fs.readFileSync(path.join(root, file), 'utf8')),
    );
    assert.deepEqual(converters, ['extension/debug/launchCommand.ts'], 'one converter');
  });
});
