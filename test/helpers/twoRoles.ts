/**
 * Several policies in one run, as the tests drive it: `lightning train --policy planner=^planner$ --policy
 * solver=^solver` of the two-role agent (test/fixtures/agents/two-role-agent.mjs) on a fresh tiny Qwen2 and store, and
 * what the record of each call should say. The planner is routed by the agent name in its baggage, the solver by the
 * model it asks for, and the critic's call matches neither (the base model answers it, and it trains nowhere).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import type { ImportDatasetParams } from '../../trainer-daemon/protocol';
import { REPO_ROOT, runCli, startDaemon, type CliResult, type RunningDaemon } from './daemon';
import { saveTinyQwen, venvPython } from './tinyHf';
import { tempDir } from './tmp';

export const TWO_ROLE_AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'two-role-agent.mjs');

/** Each rollout's calls, in order: the adapter (or base) that answered and why. */
export const TWO_ROLES = [
  ['planner', 'agent:planner'],
  ['solver', 'model:solver-model'],
  ['base', 'none'],
];

/** A rollout's LLM calls: `[lightning.policy, lightning.policy_route]` each, in call order. */
export function routes(store: Store, rolloutId: string): string[][] {
  return store
    .listSpans(rolloutId, -1, 100)
    .filter((s) => s.category === 'llm')
    .map((s) => [String(s.attributes['lightning.policy']), String(s.attributes['lightning.policy_route'])]);
}

export interface TwoRolesRun {
  /** The store, opened once the daemon has stopped (closed when the test ends). */
  readonly store: Store;
  readonly storeFile: string;
  /** `lightning train`'s output. */
  readonly trained: CliResult;
}

/** A fresh tiny Qwen2 and store, and a daemon on that store with `tasks` imported as the dataset `roles`. */
export interface TwoRolesWorld {
  readonly cwd: string;
  readonly python: string;
  readonly model: string;
  readonly storeFile: string;
  readonly daemon: RunningDaemon;
  readonly client: RpcClient;
}

/** {@link TwoRolesWorld}: its client and daemon end with the test (stopping the daemon before is fine). */
export async function twoRolesWorld(t: TestContext, tasks: ImportDatasetParams['tasks']): Promise<TwoRolesWorld> {
  const cwd = tempDir(t);
  const python = venvPython();
  const model = path.join(cwd, 'tiny-qwen2');
  saveTinyQwen(python, model);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'roles', tasks });
  return { cwd, python, model, storeFile, daemon, client };
}

/**
 * `train --policy planner=… --policy solver=…` of the two-role agent on one training task ("3 plus 4"), with `flags`
 * added (iterations, samples, the agent mode, ranks, Ray); fails the test unless the command exits 0.
 */
export async function trainTwoRoles(t: TestContext, flags: readonly string[]): Promise<TwoRolesRun> {
  const { cwd, python, model, storeFile, daemon } = await twoRolesWorld(t, [
    { id: 't1', split: 'train', input: { question: '3 plus 4' }, expected: 7 },
  ]);
  const trained = await runCli(
    [
      'train',
      ...['--model', model, '--dataset', 'roles', '--policy', 'planner=^planner$', '--policy', 'solver=^solver'],
      ...[...flags, '--device', 'cpu', '--python', python, '--store', storeFile, '--json'],
      ...['--', process.execPath, TWO_ROLE_AGENT],
    ],
    { cwd },
  );
  assert.equal(trained.code, 0, `${trained.stdout}\n${trained.stderr}`);
  await daemon.stop();
  const store = Store.open(storeFile);
  t.after(() => store.close());
  return { store, storeFile, trained };
}
