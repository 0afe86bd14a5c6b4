/**
 * The editor's side of Optimize This Prompt against the real CLI and daemon: the command line it
 * builds (trainArgs) runs `lightning train --algorithm apo --json` as the extension does
 * (startTrainProcess, the key only in the environment), the run is named by its first line and its
 * result read from the last; Apply's edit writes the best prompt back into the agent's string
 * literal; a cancel through trainingRuns/cancel (the progress notification's Cancel) stops the run.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promptTarget } from '../../extension/apo/promptTarget';
import { startTrainProcess } from '../../extension/apo/trainProcess';
import { LAPTOP_DEFAULTS, trainArgs } from '../../extension/apo/trainArgs';
import { applyTextEdit, promptEdit } from '../../trainer-daemon/protocol';
import { findDaemon } from '../../trainer-daemon/protocol/discovery';
import { RpcClient } from '../../trainer-daemon/protocol/connection';
import { AGENT, SEED_PROMPT, setUp } from '../helpers/apo';
import { CLI } from '../helpers/daemon';
import type { ScriptedUpstream } from '../helpers/scriptedUpstream';

const SOURCE = `const PROMPT = '${SEED_PROMPT}';\nconsole.log(PROMPT);\n`;

function start(
  cwd: string,
  upstream: ScriptedUpstream,
  onStarted: (runId: string) => void,
  agentEnv: NodeJS.ProcessEnv = {},
) {
  const progress: string[] = [];
  const args = trainArgs({
    storeFile: path.join(cwd, '.lightning', 'store.db'),
    resource: 'prompt',
    dataset: 'sums',
    valDataset: null,
    settings: { ...LAPTOP_DEFAULTS, critiqueModel: 'critic', editModel: 'editor' },
    promptFile: null,
    agentArgv: [process.execPath, AGENT],
  });
  const run = startTrainProcess({
    runtime: { command: process.execPath, env: {}, description: 'test' },
    cliPath: CLI,
    args,
    cwd,
    env: {
      ...process.env,
      LIGHTNING_UPSTREAM_URL: upstream.url,
      LIGHTNING_UPSTREAM_API_KEY: 'sk-editor-secret',
      OPENAI_BASE_URL: '',
      OPENAI_API_BASE: '',
      OPENAI_API_KEY: '',
      ...agentEnv,
    },
    onStarted,
    onProgress: (line) => progress.push(line),
  });
  return { run, progress };
}

describe('Optimize This Prompt: the training process and Apply', () => {
  it('runs APO with the editor’s arguments, reports the run, and Apply writes the best prompt into the literal', async (t) => {
    const { cwd, upstream } = await setUp(t);
    const agentFile = path.join(cwd, 'agent.mjs');
    fs.writeFileSync(agentFile, SOURCE);
    const cursor = SOURCE.indexOf('{a}');
    const target = promptTarget(SOURCE, { start: cursor, end: cursor }, false)!;
    assert.equal(target.prompt, SEED_PROMPT);

    let runId: string | undefined;
    const { run, progress } = start(cwd, upstream, (id) => (runId = id));
    const result = await run.result;
    assert.equal(result.runId, runId, 'the first line named the run the result is for');
    assert.ok(
      progress.some((line) => /round 1/i.test(line)),
      `progress lines: ${progress.join(' | ')}`,
    );
    assert.equal(result.seed.valScore, 0.5);
    assert.equal(result.best.valScore, 1);
    assert.match(result.best.prompt, /digits/);
    assert.ok(result.rollouts <= LAPTOP_DEFAULTS.budgetRollouts && result.llmCalls <= LAPTOP_DEFAULTS.budgetCalls);
    assert.ok(
      upstream.requests.some((request) => request.headers.authorization === 'Bearer sk-editor-secret'),
      'the key from the environment reached the upstream',
    );
    assert.ok(
      !fs.readFileSync(path.join(cwd, '.lightning', 'store.db')).includes('sk-editor-secret'),
      'the key is not in the store',
    );

    const applied = applyTextEdit(SOURCE, promptEdit(SOURCE, target.location, result.best.prompt));
    const literal = result.best.prompt.replaceAll('\n', '\\n');
    assert.equal(applied, `const PROMPT = '${literal}';\nconsole.log(PROMPT);\n`);
    assert.equal(applied.split('\n').length, SOURCE.split('\n').length, 'the new lines are escaped inside the literal');
  });

  it('the notification’s Cancel (trainingRuns/cancel) stops the run; the result so far still arrives', async (t) => {
    const { cwd, upstream } = await setUp(t);
    let cancelled: Promise<unknown> | undefined;
    const { run } = start(
      cwd,
      upstream,
      (runId) => {
        const daemon = findDaemon(path.join(cwd, '.lightning', 'store.db'))!;
        cancelled = RpcClient.connect(daemon.info.url, daemon.token).then(async (client) => {
          await client.request('cancelTrainingRun', { id: runId });
          client.dispose();
        });
      },
      { AGENT_DELAY_MS: '300' },
    );
    const outcome = await run.result.then(
      (result) => result.stopReason,
      (error: Error) => error.message,
    );
    await cancelled;
    assert.match(outcome, /^cancelled$|without a result: .*cancelled before the seed prompt was scored/);
  });
});
