/**
 * The editor's side of Optimize This Prompt against the real daemon: the configuration it builds (apoConfig) and the
 * launch configuration's variables (apoStartEnv) go to `training/start` as the extension sends them, to a daemon
 * started as the extension's supervisor starts it (the upstream key in its environment only); the run is followed
 * through `trainingRuns/changed` as the progress notification follows it (training/followRun.ts) and its typed result
 * read from the run; Apply's edit writes the best prompt back into the agent's string literal. The notification's
 * Cancel (trainingRuns/cancel) ends the run cancelled with the result so far, its candidates kept; a key among the
 * launch configuration's variables reaches the agents and the optimizer's calls, never the store.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { apoConfig, apoStartEnv, LAPTOP_DEFAULTS } from '../../extension/apo/apoSettings';
import { promptTarget } from '../../extension/apo/promptTarget';
import type { AgentCommand } from '../../extension/debug/launchCommand';
import { followRun } from '../../extension/training/followRun';
import {
  applyTextEdit,
  candidatesOf,
  promptEdit,
  type ApoConfig,
  type TrainingRunSummary,
} from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Emitter } from '../../trainer-daemon/protocol/event';
import { AGENT, SEED_PROMPT, setUp } from '../helpers/apo';
import { startDaemon } from '../helpers/daemon';
import type { ScriptedUpstream } from '../helpers/scriptedUpstream';
import { waitFor } from '../helpers/tmp';

const SOURCE = `const PROMPT = '${SEED_PROMPT}';\nconsole.log(PROMPT);\n`;
const DAEMON_KEY = 'sk-editor-secret-0123456789';

/** The daemon as the supervisor starts it, and a client as the extension's. */
async function editorDaemon(t: Parameters<typeof setUp>[0], cwd: string, upstream: ScriptedUpstream) {
  const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'), [], {
    LIGHTNING_UPSTREAM_URL: upstream.url,
    LIGHTNING_UPSTREAM_API_KEY: DAEMON_KEY,
    OPENAI_BASE_URL: '',
    OPENAI_API_BASE: '',
    OPENAI_API_KEY: '',
  });
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  return client;
}

/** What OptimizePrompt sends: its configuration and the launch configuration's variables. */
async function start(
  client: RpcClient,
  cwd: string,
  env: AgentCommand['env'] = {},
  settings: Partial<typeof LAPTOP_DEFAULTS> = {},
): Promise<{ runId: string; config: ApoConfig }> {
  const agent: AgentCommand = { argv: [process.execPath, AGENT], cwd, env, notes: [] };
  const config = apoConfig({
    resource: 'prompt',
    dataset: 'sums',
    valDataset: null,
    settings: { ...LAPTOP_DEFAULTS, critiqueModel: 'critic', editModel: 'editor', ...settings },
    promptFile: null,
    agent,
    processEnv: {},
  });
  assert.ok(config.ok, config.ok ? '' : config.message);
  const run = await client.request('startTraining', { config: config.value, env: apoStartEnv(agent) });
  return { runId: run.id, config: config.value };
}

/** The run followed as the progress notification follows it: each change announced, to its end. */
function follow(client: RpcClient, runId: string, progress: string[] = []): Promise<TrainingRunSummary> {
  return followRun(
    runId,
    {
      onDidChange: (listener) => client.onNotification('trainingRunChanged', ({ run }) => listener(run)),
      onDidConnect: new Emitter<unknown>().event,
    },
    {
      read: async () => (await client.request('getTrainingRun', { id: runId, afterStep: Number.MAX_SAFE_INTEGER })).run,
      progress: (run) => progress.push(`${run.status} ${run.step}`),
      warn: (error) => assert.fail(String(error)),
    },
  );
}

describe('Optimize This Prompt: the run in the daemon, and Apply', () => {
  it('runs APO from the editor’s configuration, follows it to its typed result, and Apply writes the best prompt into the literal', async (t) => {
    const { cwd, upstream } = await setUp(t);
    const client = await editorDaemon(t, cwd, upstream);
    const cursor = SOURCE.indexOf('{a}');
    const target = promptTarget(SOURCE, { start: cursor, end: cursor }, false)!;
    assert.equal(target.prompt, SEED_PROMPT);

    // One round where the defaults have two (a setting the user may change): the first round's candidates reach 1.0
    // on validation already, and apo.test.ts checks the rounds. About half the agent processes.
    const { runId } = await start(client, cwd, {}, { rounds: 1 });
    const progress: string[] = [];
    const final = await follow(client, runId, progress);
    assert.equal(final.status, 'succeeded', final.error ?? '');
    assert.ok(progress.includes('running 1'), `followed round by round: ${progress.join(' | ')}`);
    switch (final.algorithm) {
      case 'apo':
        break;
      default:
        assert.fail(`an APO run ended as ${final.algorithm}`);
    }
    const result = final.result!;
    assert.equal(result.runId, runId);
    assert.equal(result.seed.valScore, 0.5);
    assert.equal(result.best.valScore, 1);
    assert.match(result.best.prompt, /digits/);
    assert.ok(result.rollouts <= LAPTOP_DEFAULTS.budgetRollouts && result.llmCalls <= LAPTOP_DEFAULTS.budgetCalls);
    assert.ok(
      upstream.requests.some((request) => request.headers.authorization === `Bearer ${DAEMON_KEY}`),
      "the daemon's key reached the upstream",
    );
    assert.ok(
      !fs.readFileSync(path.join(cwd, '.lightning', 'store.db')).includes(DAEMON_KEY),
      'the key is not in the store',
    );

    const applied = applyTextEdit(SOURCE, promptEdit(SOURCE, target.location, result.best.prompt));
    const literal = result.best.prompt.replaceAll('\n', '\\n');
    assert.equal(applied, `const PROMPT = '${literal}';\nconsole.log(PROMPT);\n`);
    assert.equal(applied.split('\n').length, SOURCE.split('\n').length, 'the new lines are escaped inside the literal');
  });

  it('the notification’s Cancel (trainingRuns/cancel) ends the run cancelled with the best so far; the launch key reached the calls, not the store', async (t) => {
    const { cwd, upstream } = await setUp(t);
    const client = await editorDaemon(t, cwd, upstream);
    const launchKey = 'sk-launch-secret-9876543210';
    const { runId, config } = await start(client, cwd, { OPENAI_API_KEY: launchKey, AGENT_DELAY_MS: '300' });
    assert.ok(!JSON.stringify(config).includes(launchKey), 'the key is not in the configuration');
    const ended = follow(client, runId);
    // Once the seed is scored (round 0 recorded), a cancel keeps a result.
    await waitFor(
      async () => ((await client.request('getTrainingRun', { id: runId })).run.latest.best_val_score ?? null) !== null,
      'the seed scored',
      60_000,
    );
    const cancelled = await client.request('cancelTrainingRun', { id: runId });
    assert.equal(cancelled.status, 'cancelled', 'the answer is the cancelled run');
    const final = await ended;
    switch (final.algorithm) {
      case 'apo':
        assert.deepEqual(
          [final.status, final.cancelRequested, final.result?.stopReason],
          ['cancelled', true, 'cancelled'],
        );
        assert.equal(final.result?.seed.valScore, 0.5);
        break;
      default:
        assert.fail(`an APO run ended as ${final.algorithm}`);
    }
    const detail = await client.request('getTrainingRun', { id: runId });
    assert.equal(candidatesOf(detail).find((c) => c.id === 'seed')?.valScore, 0.5, 'the candidates are kept');
    const left = await client.request('listRollouts', { status: ['running', 'queued'] });
    assert.equal(left.items.length, 0, 'no agent left running');
    assert.ok(
      upstream.requests.some((request) => request.headers.authorization === `Bearer ${launchKey}`),
      'the launch configuration’s key reached the upstream',
    );
    assert.ok(
      !fs.readFileSync(path.join(cwd, '.lightning', 'store.db')).includes(launchKey),
      'the key is not in the store',
    );
  });
});
