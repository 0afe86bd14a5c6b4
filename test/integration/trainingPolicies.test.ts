// needs: venv
/**
 * Several policies in one GRPO run, with real parts: `lightning train --policy planner=… --policy solver=…` on a tiny
 * Qwen2 built from its config (random weights saved with save_pretrained, no download) trained with LoRA by the test
 * venv's trainer worker, the
 * daemon's recording proxy routing each call of a two-role agent (test/fixtures/agents/two-role-agent.mjs) to its
 * policy's adapter: the planner by the agent name in its baggage, the solver by the model it asks for, and a critic
 * call that matches neither answered by the base model. Both policies get transitions, an update and a checkpoint per
 * iteration; the record names the adapter that answered each call; the critic's calls are recorded and never trained.
 * The shorter runs share test/helpers/twoRoles.ts with the same run on Ray (rayPolicies.test.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { ListRolloutsParams, checkpointsOf, type TrainingRunSummary } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { runCli } from '../helpers/daemon';
import { TWO_ROLES, TWO_ROLE_AGENT, routes, trainTwoRoles, twoRolesWorld } from '../helpers/twoRoles';

test(
  'train --policy planner --policy solver: each call answered by its adapter, each policy trained and saved on its own calls',
  { timeout: 900_000 },
  async (t) => {
    const { cwd, python, model, storeFile, daemon, client } = await twoRolesWorld(t, [
      { id: 't1', split: 'train', input: { question: '3 plus 4' }, expected: 7 },
      { id: 't2', split: 'train', input: { question: '2 times 5' }, expected: 10 },
      { id: 'v1', split: 'val', input: { question: '6 minus 1' }, expected: 5 },
    ]);

    const trained = await runCli(
      [
        'train',
        '--model',
        model,
        '--dataset',
        'roles',
        '--policy',
        'planner=^planner$',
        '--policy',
        'solver=^solver',
        '--iterations',
        '2',
        '--samples',
        '2',
        '--workers',
        '4',
        '--keep-checkpoints',
        '1',
        '--eval-every',
        '2',
        '--device',
        'cpu',
        '--python',
        python,
        '--store',
        storeFile,
        '--json',
        '--',
        process.execPath,
        TWO_ROLE_AGENT,
      ],
      { cwd },
    );
    assert.equal(trained.code, 0, `${trained.stdout}\n${trained.stderr}`);
    const runs = JSON.parse(
      (await runCli(['train', '--list', '--json', '--store', storeFile])).stdout,
    ) as TrainingRunSummary[];
    const run = runs[0]!;
    assert.equal(run.status, 'succeeded', run.error ?? '');
    assert.deepEqual(run.algorithm === 'grpo' && run.config.policies.map((p) => [p.name, p.match]), [
      ['planner', '^planner$'],
      ['solver', '^solver'],
    ]);
    const detail = await client.request('getTrainingRun', { id: run.id });
    const at = (step: number, name: string): number | undefined =>
      detail.metrics.find((m) => m.step === step && m.name === name)?.value;
    for (const step of [1, 2]) {
      // 2 tasks × 2 samples: each policy trains on its one call per rollout; the critic's 4 calls train nowhere.
      assert.equal(at(step, 'policy/planner/transitions'), 4, `step ${step}`);
      assert.equal(at(step, 'policy/solver/transitions'), 4, `step ${step}`);
      assert.equal(at(step, 'transitions'), 8, `step ${step}: the unmatched calls are not trained`);
      for (const policy of ['planner', 'solver']) {
        for (const metric of ['loss', 'kl', 'entropy'])
          assert.ok(
            Number.isFinite(at(step, `policy/${policy}/${metric}`)),
            `step ${step}: policy/${policy}/${metric}`,
          );
      }
      assert.equal(at(step, 'loss'), undefined, 'no loss of a single policy');
      assert.ok(Number.isFinite(at(step, 'reward/mean')), 'the episode reward stays one');
    }
    assert.ok(Number.isFinite(at(2, 'val/reward')));

    // A checkpoint per policy per iteration: an ordinary LoRA checkpoint of that adapter alone, named by its folder.
    const checkpoints = checkpointsOf(detail);
    // Retention per policy (--keep-checkpoints 1): each keeps its best and last, step 2 (validated); step 1's folder
    // goes with its policies' checkpoints.
    assert.deepEqual(checkpoints.map((c) => `${c.step}/${path.basename(c.path)}`).sort(), ['2/planner', '2/solver']);
    assert.ok(!fs.existsSync(path.join(path.dirname(checkpoints[0]!.path), '..', '1')), 'step 1 is gone');
    assert.ok(
      fs.existsSync(path.join(checkpoints[0]!.path, 'optimizer.pt')),
      "each policy's newest keeps its optimizer",
    );
    assert.ok(
      fs.existsSync(path.join(checkpoints[1]!.path, 'optimizer.pt')),
      "each policy's newest keeps its optimizer",
    );
    for (const checkpoint of checkpoints) {
      const config = JSON.parse(fs.readFileSync(path.join(checkpoint.path, 'config.json'), 'utf8')) as {
        policy?: string;
        adapter: { kind: string };
        step: number;
      };
      assert.equal(config.policy, path.basename(checkpoint.path));
      assert.equal(config.step, checkpoint.step, "the policy's own count of updates: one per iteration");
      assert.equal(config.adapter.kind, 'lora');
    }

    // The set of one step as one PEFT folder, an adapter per policy (through the daemon).
    const planner = checkpoints.find((c) => c.step === 2 && path.basename(c.path) === 'planner')!;
    const exported = await runCli(
      [
        'checkpoints',
        'export',
        planner.id,
        '--format',
        'peft',
        '--set',
        '--out',
        'exports/set',
        '--store',
        storeFile,
        '--json',
      ],
      { cwd },
    );
    assert.equal(exported.code, 0, exported.stderr);
    const files = (JSON.parse(exported.stdout) as { files: string[] }).files;
    for (const file of [
      'planner/adapter_config.json',
      'planner/adapter_model.safetensors',
      'solver/adapter_config.json',
      'solver/adapter_model.safetensors',
    ])
      assert.ok(files.includes(file), `${file} in ${files.join(', ')}`);
    // Stock peft alone (-I: no project code) loads both adapters of the folder onto the base.
    const loaded = execFileSync(
      python,
      [
        '-I',
        '-c',
        [
          'import sys, transformers, peft',
          'base, out = sys.argv[1:3]',
          'm = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), out + "/planner", adapter_name="planner")',
          'm.load_adapter(out + "/solver", adapter_name="solver")',
          'print(",".join(sorted(m.peft_config)))',
        ].join('\n'),
        model,
        path.join(cwd, 'exports', 'set'),
      ],
      { encoding: 'utf8', env: { PATH: '/usr/bin:/bin', HF_HUB_OFFLINE: '1' } },
    );
    assert.equal(loaded.trim().split('\n').at(-1), 'planner,solver');
    const merged = await runCli(
      ['checkpoints', 'export', planner.id, '--format', 'merged', '--set', '--out', 'exports/m', '--store', storeFile],
      { cwd },
    );
    assert.match(merged.stderr, /set: the policies are exported as one PEFT folder with an adapter each: format peft/);

    // The record of every call names the adapter that answered it and why.
    await daemon.stop();
    const store = Store.open(storeFile);
    t.after(() => store.close());
    const rollouts = store.listRollouts(ListRolloutsParams.parse({ mode: 'train', limit: 100 })).items;
    assert.equal(rollouts.length, 8, '2 iterations × 2 tasks × 2 samples');
    for (const rollout of rollouts) {
      const calls = store
        .listSpans(rollout.id, -1, 100)
        .filter((s) => s.category === 'llm')
        .map((s) => [
          s.attributes['lightning.policy'],
          s.attributes['lightning.policy_route'],
          s.attributes['lightning.upstream'],
        ]);
      assert.equal(calls.length, 3, rollout.id);
      assert.deepEqual(
        calls.map(([policy, route]) => [policy, route]),
        [
          ['planner', 'agent:planner'],
          ['solver', 'model:solver-model'],
          ['base', 'none'],
        ],
      );
      assert.match(String(calls[0]![2]), /\/adapter\/planner\/v1$/);
      assert.match(String(calls[1]![2]), /\/adapter\/solver\/v1$/);
      assert.match(String(calls[2]![2]), /\/base\/v1$/);
    }
    // Validation is routed as training is, on the greedy routes.
    const validation = store.listRollouts(ListRolloutsParams.parse({ mode: 'val', limit: 100 })).items;
    assert.ok(validation.length >= 2, 'before the first iteration and after the last');
    for (const rollout of validation) {
      const upstreams = store
        .listSpans(rollout.id, -1, 100)
        .filter((s) => s.category === 'llm')
        .map((s) => String(s.attributes['lightning.upstream']).replace(/^.*\/greedy\//, 'greedy/'));
      assert.deepEqual(upstreams, ['greedy/adapter/planner/v1', 'greedy/adapter/solver/v1', 'greedy/base/v1']);
    }
  },
);

test(
  'several policies with long-lived agent workers (--agent-mode worker): each call routed, each policy trained',
  { timeout: 900_000 },
  async (t) => {
    const { store } = await trainTwoRoles(t, [
      '--iterations',
      '1',
      '--samples',
      '3',
      '--agent-mode',
      'worker',
      '--workers',
      '1',
      '--per-worker',
      '3',
    ]);
    const run = store.listTrainingRuns(10)[0]!;
    assert.equal(run.status, 'succeeded', run.error ?? '');
    const rollouts = store.listRollouts(ListRolloutsParams.parse({ mode: 'train', limit: 100 })).items;
    assert.equal(rollouts.length, 3);
    for (const rollout of rollouts) assert.deepEqual(routes(store, rollout.id), TWO_ROLES, rollout.id);
    const metrics = store.getTrainingRun(run.id).metrics.filter((m) => m.step === 1);
    const at = (name: string) => metrics.find((m) => m.name === name)?.value;
    assert.deepEqual([at('policy/planner/transitions'), at('policy/solver/transitions'), at('transitions')], [3, 3, 6]);
  },
);

test(
  'several policies under torchrun (2 gloo ranks on the CPU): every rank holds every adapter, each policy updated on both',
  { timeout: 900_000 },
  async (t) => {
    const { store } = await trainTwoRoles(t, [
      ...['--iterations', '1', '--samples', '2', '--workers', '2', '--nproc-per-node', '2'],
    ]);
    const run = store.listTrainingRuns(10)[0]!;
    assert.equal(run.status, 'succeeded', run.error ?? '');
    const metrics = store.getTrainingRun(run.id).metrics.filter((m) => m.step === 1);
    const at = (name: string) => metrics.find((m) => m.name === name)?.value;
    assert.deepEqual([at('policy/planner/transitions'), at('policy/solver/transitions'), at('worldSize')], [2, 2, 2]);
    assert.ok(Number.isFinite(at('policy/planner/loss')) && Number.isFinite(at('policy/solver/loss')));
    assert.deepEqual(
      store
        .checkpoints(run.id)
        .map((c) => path.basename(c.path))
        .sort(),
      ['planner', 'solver'],
    );
  },
);
