/**
 * Use Checkpoint's pure parts: which upstream a debug session's rollout gets, what a dataset run is
 * given, how checkpoints are offered, which errors point to the trainer setup; the store's record
 * of which policy served a rollout; and what Delete Checkpoint refuses and asks.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { checkpointArgs, checkpointItems, UseCheckpointArgument } from '../../extension/checkpoints/routing';
import { debugRoute } from '../../extension/debug/route';
import { needsTrainerSetup } from '../../trainer-daemon/protocol/setupAdvice';
import type { LaunchConfig } from '../../extension/debug/launchConfig';
import { deleteConfirmation, deleteRefusal } from '../../extension/checkpoints/deleteText';
import { checkpointSize, checkpointsTotal } from '../../trainer-daemon/protocol/format';
import { WebviewToExtension } from '../../trainer-daemon/protocol/ui/panelMessages';
import { describeMetrics, LoadParams, type Checkpoint, type ServedPolicy } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from '../helpers/tmp';
import { testGrpoConfig } from '../helpers/trainingConfigs';
import { resumeRoutingOptions } from '../../trainer-daemon/cli/callRouting';
import { InvalidInputError, NotFoundError, TrainerUnavailableError } from '../../trainer-daemon/protocol/errors';
import { parsed } from '../helpers/params';

const served: ServedPolicy = {
  checkpointId: 'ckpt-a1',
  runId: 'train-1',
  step: 3,
  url: 'http://127.0.0.1:4567',
  policyVersion: 7,
  device: 'cpu',
  startedAt: 1,
};
const launch = (env?: Record<string, string>): LaunchConfig => ({
  type: 'node',
  name: 'agent',
  request: 'launch',
  lightning: true,
  ...(env ? { env } : {}),
});

describe('Use Checkpoint: routing', () => {
  it('without a checkpoint in use, a debug rollout keeps its own upstream (the configuration, else the editor environment, else the daemon)', () => {
    assert.deepEqual(debugRoute(launch({ OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1/' }), {}, null), {
      upstream: 'http://127.0.0.1:11434/v1',
      providerUpstreams: {},
      tokenIds: false,
      resources: {},
    });
    assert.deepEqual(debugRoute(launch(), { OPENAI_API_BASE: 'http://gw/v1' }, null), {
      upstream: 'http://gw/v1',
      providerUpstreams: {},
      tokenIds: false,
      resources: {},
    });
    assert.deepEqual(debugRoute(launch(), {}, null), {
      upstream: null,
      providerUpstreams: {},
      tokenIds: false,
      resources: {},
    });
    // Its Anthropic and Gemini base URLs, from the configuration over the editor's environment, are those calls'
    // upstreams.
    assert.deepEqual(
      debugRoute(
        launch({ ANTHROPIC_BASE_URL: 'http://127.0.0.1:8000/' }),
        { GOOGLE_GEMINI_BASE_URL: 'http://gem', ANTHROPIC_BASE_URL: 'http://other' },
        null,
      ).providerUpstreams,
      { anthropic: 'http://127.0.0.1:8000', gemini: 'http://gem' },
    );
  });

  it('with a checkpoint in use, its server answers — over the agent’s own OPENAI_BASE_URL — with token ids, and the rollout records it', () => {
    const route = debugRoute(
      launch({ OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1' }),
      { OPENAI_BASE_URL: 'https://api.openai.com/v1' },
      served,
    );
    assert.deepEqual(route, { upstream: 'http://127.0.0.1:4567/v1', tokenIds: true, resources: { policy: 7 } });
  });

  it('a dataset run gets --checkpoint only when one is served', () => {
    assert.deepEqual(checkpointArgs(served), ['--checkpoint', 'ckpt-a1']);
    assert.deepEqual(checkpointArgs(null), []);
  });

  it('the command takes { checkpointId } from a panel button and nothing else', () => {
    assert.ok(UseCheckpointArgument.safeParse({ checkpointId: 'ckpt-a1' }).success);
    assert.ok(!UseCheckpointArgument.safeParse({ id: 'ckpt-a1' }).success);
    assert.ok(!UseCheckpointArgument.safeParse('ckpt-a1').success);
  });

  it('offers checkpoints newest first with step, run and key metrics, marking the one in use', () => {
    const checkpoint = (id: string, step: number, createdAt: number, metrics: Record<string, number>): Checkpoint => ({
      id,
      runId: 'train-1',
      step,
      path: `/c/${step}`,
      metrics,
      createdAt,
    });
    const items = checkpointItems(
      [
        checkpoint('ckpt-1', 1, 1000, { 'reward/mean': 0.25, loss: 0.5 }),
        checkpoint('ckpt-2', 2, 2000, { 'val/reward': 0.8125, 'reward/mean': 0.5, kl: 0.0123 }),
      ],
      'ckpt-1',
    );
    assert.deepEqual(
      items.map((i) => [i.label, i.description]),
      [
        ['step 2 · train-1', 'val 0.813 · reward 0.500 · KL 0.0123'],
        ['$(check) step 1 · train-1', 'reward 0.250 · loss 0.500'],
      ],
    );
    assert.equal(describeMetrics({ parameters: 12345 }), '');
  });

  it('points errors about the trainer’s Python to the setup', () => {
    // By the daemon's error kind (servePolicy's error, test/integration/useCheckpoint.test.ts), never its message.
    assert.ok(
      needsTrainerSetup(
        new TrainerUnavailableError('--python /x cannot run the trainer: not found. Run `lightning doctor`.').kind,
      ),
    );
    assert.ok(!needsTrainerSetup(new NotFoundError('checkpoint ckpt-1 does not exist').kind));
    assert.ok(!needsTrainerSetup(null));
  });
});

describe('Use Checkpoint: the record', () => {
  it('a rollout pinned to a checkpoint’s policy version names it; other rollouts name no policy', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const run = store.recordTrainingRun({ algorithm: 'grpo', config: testGrpoConfig() });
    const checkpoint = store.recordTrainingStep(run.id, 4, {}, { dir: '/ckpt/4', metrics: { loss: 1 } })!;
    const version = store.policyVersionFor(checkpoint);
    assert.equal(store.policyVersionFor(checkpoint), version, 'one policy version per checkpoint');
    assert.equal(store.checkpoint(checkpoint.id).path, '/ckpt/4');
    assert.throws(() => store.checkpoint('ckpt-nope'), /checkpoint ckpt-nope does not exist/);

    const servedRollout = store.createRollout(parsed('createRollout', { resources: { policy: version } }));
    const plain = store.createRollout(parsed('createRollout', {}));
    assert.deepEqual(store.getRolloutDetail(servedRollout.id).servedBy, {
      runId: run.id,
      step: 4,
      checkpoint: '/ckpt/4',
      checkpointId: checkpoint.id,
    });
    assert.equal(store.getRolloutDetail(plain.id).servedBy, null);
    assert.deepEqual(store.getRolloutDetail(plain.id).resources, {}, 'the policy is never pinned by default');
    // A training iteration's policy (the current version) is recorded only for the rollouts it served too.
    const iteration = store.addPolicyVersion({ runId: run.id, step: 5, checkpoint: '/ckpt/5' });
    assert.equal(store.getRolloutDetail(store.createRollout(parsed('createRollout', {})).id).servedBy, null);
    assert.deepEqual(
      store.getRolloutDetail(store.createRollout(parsed('createRollout', { resources: { policy: iteration } })).id)
        .servedBy,
      { runId: run.id, step: 5, checkpoint: '/ckpt/5', checkpointId: null },
    );
  });

  it('the worker is loaded from a checkpoint alone, or from a model and an adapter', () => {
    assert.ok(LoadParams.safeParse({ checkpoint: '/ckpt/4', device: 'cpu' }).success);
    assert.ok(LoadParams.safeParse({ model: { kind: 'tiny' }, adapter: { kind: 'full' } }).success);
    const neither = LoadParams.safeParse({ device: 'cpu' });
    assert.ok(!neither.success);
    assert.match(neither.error.issues[0]!.message, /model and adapter are required without a checkpoint/);
  });
});

describe('Use Checkpoint: resuming a batch', () => {
  it('keeps the checkpoint the batch was started with; another one, one for a batch without, or --upstream over it is refused naming both', () => {
    assert.deepEqual(resumeRoutingOptions({ tokenIds: true }, 'batch-1', 'ckpt-a'), {
      tokenIds: true,
      checkpoint: 'ckpt-a',
    });
    assert.deepEqual(resumeRoutingOptions({ checkpoint: 'ckpt-a' }, 'batch-1', 'ckpt-a'), { checkpoint: 'ckpt-a' });
    assert.deepEqual(resumeRoutingOptions({ upstream: 'http://gw/v1' }, 'batch-1', null), { upstream: 'http://gw/v1' });
    assert.throws(
      () => resumeRoutingOptions({ checkpoint: 'ckpt-b' }, 'batch-1', 'ckpt-a'),
      (e: Error) =>
        e instanceof InvalidInputError &&
        /--checkpoint ckpt-b: batch batch-1 was started with checkpoint ckpt-a/.test(e.message),
    );
    assert.throws(
      () => resumeRoutingOptions({ checkpoint: 'ckpt-b' }, 'batch-1', null),
      /--checkpoint ckpt-b: batch batch-1 was started without a checkpoint/,
    );
    assert.throws(
      () => resumeRoutingOptions({ upstream: 'http://gw/v1' }, 'batch-1', 'ckpt-a'),
      /--upstream: batch batch-1 was started with checkpoint ckpt-a/,
    );
  });
});

describe('Delete Checkpoint: what it refuses and asks', () => {
  const checkpoint: Checkpoint = {
    id: 'ckpt-a1',
    runId: 'train-1',
    step: 3,
    path: '/x/3',
    metrics: {},
    createdAt: 1,
    bytes: 3 * 1024 * 1024,
    optimizerState: true,
  };

  it('refuses the checkpoint served now, and the one this workspace uses, naming the way out', () => {
    assert.equal(deleteRefusal(checkpoint, null, undefined), undefined);
    assert.equal(deleteRefusal(checkpoint, { checkpointId: 'ckpt-other' }, { checkpointId: 'ckpt-b' }), undefined);
    const refusal =
      'Lightning: checkpoint step 3 of train-1 is in use (Use Checkpoint): your rollouts are answered by it. Stop Using Checkpoint first, then delete it.';
    assert.equal(deleteRefusal(checkpoint, served, undefined), refusal);
    assert.equal(deleteRefusal(checkpoint, null, { checkpointId: 'ckpt-a1' }), refusal);
  });

  it('asks with the checkpoint, its size and that it cannot be undone; sizes and totals read as the CLI writes them', () => {
    assert.equal(
      deleteConfirmation(checkpoint),
      'Delete checkpoint step 3 of train-1 (3.0 MiB +optimizer)? Its folder is removed from disk; this cannot be undone.',
    );
    assert.equal(
      deleteConfirmation({ ...checkpoint, bytes: undefined }),
      'Delete checkpoint step 3 of train-1? Its folder is removed from disk; this cannot be undone.',
    );
    assert.equal(checkpointSize({ bytes: null }), 'missing');
    assert.equal(checkpointsTotal([checkpoint, { bytes: 1024 * 1024 }, { bytes: null }]), '3 checkpoints, 4.0 MiB');
    assert.equal(checkpointsTotal([{ bytes: 512 }]), '1 checkpoint, 512 B');
    assert.ok(WebviewToExtension.safeParse({ type: 'deleteCheckpoint', checkpointId: 'ckpt-a1' }).success);
    assert.ok(!WebviewToExtension.safeParse({ type: 'deleteCheckpoint', checkpointId: '' }).success);
  });
});
