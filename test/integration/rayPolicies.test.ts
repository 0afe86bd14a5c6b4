// needs: ray
/**
 * Several policies with the agents on Ray: `lightning train --ray ADDRESS --policy planner=… --policy solver=…` of the
 * two-role agent (test/helpers/twoRoles.ts) on a tiny Qwen2 built from its config, its worker a Ray task on a real
 * local Ray head. The agent on the node reaches the daemon's recording proxy over the network as any Ray agent does,
 * so its calls are routed as locally: the planner's by the baggage it sends, the solver's by the model it asks for,
 * the critic's to the base model. Both policies get transitions, an update and a checkpoint per iteration; the critic's
 * calls are recorded and never trained; `train --list` names the Ray node that ran the agents.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { ListRolloutsParams, checkpointsOf } from '../../trainer-daemon/protocol';
import { runCli } from '../helpers/daemon';
import { rayFixture } from '../helpers/ray';
import { TWO_ROLES, routes, trainTwoRoles } from '../helpers/twoRoles';

const ray = rayFixture();

before(() => ray.start());
after(() => ray.stop());

test(
  'train --ray --policy planner --policy solver: each call of the agents on the node answered by its adapter, each policy trained and saved per iteration',
  { timeout: 900_000 },
  async (t) => {
    const { store, storeFile, trained } = await trainTwoRoles(t, [
      ...['--iterations', '2', '--samples', '2', '--keep-checkpoints', 'all'],
      ...['--agent-mode', 'worker', '--workers', '1', '--per-worker', '2'],
      ...['--ray', ray.head.address, '--ray-python', ray.python],
    ]);
    assert.match(trained.stderr, new RegExp(`agents on Ray ${ray.head.address.replace(/\./g, '\\.')}`));
    const run = store.listTrainingRuns(10)[0]!;
    assert.equal(run.status, 'succeeded', run.error ?? '');

    // The record of each call names the adapter that answered it and why, though the agent ran on the Ray node.
    const rollouts = store.listRollouts(ListRolloutsParams.parse({ mode: 'train', limit: 100 })).items;
    assert.equal(rollouts.length, 4, '2 iterations × 1 task × 2 samples');
    for (const rollout of rollouts) {
      assert.deepEqual(routes(store, rollout.id), TWO_ROLES, rollout.id);
      const upstreams = store
        .listSpans(rollout.id, -1, 100)
        .filter((s) => s.category === 'llm')
        .map((s) => String(s.attributes['lightning.upstream']).replace(/^.*\/(adapter\/\w+|base)\/v1$/, '$1'));
      assert.deepEqual(upstreams, ['adapter/planner', 'adapter/solver', 'base'], rollout.id);
    }

    // Each policy's own transitions and update every iteration; the critic's calls are in neither.
    const detail = store.getTrainingRun(run.id);
    const at = (step: number, name: string): number | undefined =>
      detail.metrics.find((m) => m.step === step && m.name === name)?.value;
    for (const step of [1, 2]) {
      assert.deepEqual(
        [at(step, 'policy/planner/transitions'), at(step, 'policy/solver/transitions'), at(step, 'transitions')],
        [2, 2, 4],
        `step ${step}`,
      );
      for (const policy of ['planner', 'solver'])
        assert.ok(Number.isFinite(at(step, `policy/${policy}/loss`)), `step ${step}: policy/${policy}/loss`);
    }
    assert.deepEqual(
      checkpointsOf(detail)
        .map((c) => `${c.step}/${path.basename(c.path)}`)
        .sort(),
      ['1/planner', '1/solver', '2/planner', '2/solver'],
    );

    // The list names the Ray node that ran the agents (as their logs name it), one attempt per rollout.
    const logs = path.join(path.dirname(storeFile), 'logs', run.id);
    const workerLogs = fs
      .readdirSync(logs, { recursive: true, encoding: 'utf8' })
      .filter((file) => /worker-w\d+\.log$/.test(file));
    assert.ok(workerLogs.length >= 2, `a worker per batch: ${workerLogs.join(', ')}`);
    const nodes = new Set(
      workerLogs.map(
        (file) =>
          /^\[lightning\] running on Ray node (\S+) \(.+\), node id [0-9a-f]+\n/.exec(
            fs.readFileSync(path.join(logs, file), 'utf8'),
          )?.[1],
      ),
    );
    assert.equal(nodes.size, 1, [...nodes].join(', '));
    const [ip] = nodes;
    assert.ok(ip, workerLogs.join(', '));
    const list = await runCli(['train', '--list', '--store', storeFile]);
    assert.match(
      list.stdout,
      new RegExp(`${run.id}\\s+grpo\\s+succeeded\\s.*agents on 1 Ray node \\(${ip.replace(/\./g, '\\.')}\\)`),
    );
    const [listed] = JSON.parse((await runCli(['train', '--list', '--json', '--store', storeFile])).stdout) as Array<{
      placement?: { rayNodes: Array<{ ip: string; attempts: number }> };
    }>;
    assert.deepEqual(
      listed!.placement?.rayNodes.map((n) => [n.ip, n.attempts]),
      [[ip, 4]],
    );
  },
);
