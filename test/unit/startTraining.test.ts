/**
 * Start Training's pure parts: the quick picks' answers → GrpoConfig (and SftConfig), following a run to its end, the
 * progress and end lines, and Set Up Trainer's reading of `lightning doctor`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GrpoConfig, SftConfig, type TrainingRunSummary } from '../../trainer-daemon/protocol';
import {
  DEFAULT_SFT_SETTINGS,
  describeSftSettings,
  parseSftSetting,
  sftConfig,
} from '../../extension/training/sftSettings';
import {
  DEFAULT_SETTINGS,
  describeSettings,
  grpoConfig,
  modelSpec,
  parseNumericSetting,
  storableEnv,
} from '../../extension/training/grpoSettings';
import { endText, progressFraction, progressText } from '../../extension/training/runText';
import { needsTrainerSetup } from '../../trainer-daemon/protocol/setupAdvice';
import { doctorSummary } from '../../extension/training/doctorReport';
import { followRun } from '../../extension/training/followRun';
import { Emitter } from '../../trainer-daemon/protocol/event';
import type { AgentCommand } from '../../extension/debug/launchCommand';
import { testGrpoConfig } from '../helpers/trainingConfigs';

const agent: AgentCommand = {
  argv: ['node', '/ws/agent.mjs'],
  cwd: '/ws',
  env: { AGENT_MODEL: 'policy', UNSET: undefined },
  notes: [],
};

describe('Start Training: the answers become a GrpoConfig', () => {
  it('starts with the daemon’s own defaults', () => {
    const result = grpoConfig({
      model: { kind: 'tiny' },
      dataset: 'tools',
      command: agent,
      settings: DEFAULT_SETTINGS,
    });
    assert.ok(result.ok);
    const defaults = GrpoConfig.parse({
      model: { kind: 'tiny' },
      dataset: 'tools',
      command: { argv: ['node'], cwd: '/' },
    });
    assert.deepEqual(
      [result.value.iterations, result.value.samples, result.value.lr, result.value.valDataset, result.value.device],
      [defaults.iterations, defaults.samples, defaults.lr, null, 'auto'],
    );
    assert.deepEqual(result.value.command, {
      argv: ['node', '/ws/agent.mjs'],
      cwd: '/ws',
      env: { AGENT_MODEL: 'policy' },
    });
    assert.equal(
      describeSettings(DEFAULT_SETTINGS),
      `${defaults.iterations} iterations · ${defaults.samples} samples per task · lr ${defaults.lr} · validation: the val split · device auto`,
    );
  });

  it('carries the chosen model, settings and validation dataset', () => {
    const model = modelSpec(' Qwen/Qwen2.5-0.5B-Instruct ');
    assert.ok(model.ok);
    const result = grpoConfig({
      model: model.value,
      dataset: 'tools',
      command: agent,
      settings: { iterations: 2, samples: 2, lr: 1e-4, valDataset: 'held-out', device: 'cpu' },
    });
    assert.ok(result.ok);
    assert.deepEqual(result.value.model, { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B-Instruct' });
    assert.deepEqual(
      [result.value.iterations, result.value.samples, result.value.lr, result.value.valDataset, result.value.device],
      [2, 2, 1e-4, 'held-out', 'cpu'],
    );
    assert.deepEqual(modelSpec('tiny'), { ok: true, value: { kind: 'tiny' } });
  });

  it('keeps secrets out of the stored environment, and the protocol refuses them too', () => {
    const withKey: AgentCommand = {
      ...agent,
      env: {
        AGENT_MODEL: 'x',
        MAX_TOKENS: '64',
        TOKENIZERS_PARALLELISM: 'false',
        SERP_API_KEY: 's3cret',
        GITHUB_TOKEN: 't',
        LLM_AUTH: 'a',
        DB_PWD: 'p',
        // Secrets under harmless names, known by their values: a key-shaped string, a URL with a password.
        RENAMED: 'sk-abcdefghijklmnopqrstuvwx',
        DATABASE_URL: 'postgres://user:pw@db.example/app',
        PUBLIC_URL: 'https://example.com/app',
      },
    };
    assert.deepEqual(storableEnv(withKey.env), {
      env: {
        AGENT_MODEL: 'x',
        MAX_TOKENS: '64',
        TOKENIZERS_PARALLELISM: 'false',
        PUBLIC_URL: 'https://example.com/app',
      },
      omitted: ['SERP_API_KEY', 'GITHUB_TOKEN', 'LLM_AUTH', 'DB_PWD', 'RENAMED', 'DATABASE_URL'],
    });
    const result = grpoConfig({
      model: { kind: 'tiny' },
      dataset: 'tools',
      command: withKey,
      settings: DEFAULT_SETTINGS,
    });
    assert.ok(result.ok);
    assert.deepEqual(result.value.command.env, {
      AGENT_MODEL: 'x',
      MAX_TOKENS: '64',
      TOKENIZERS_PARALLELISM: 'false',
      PUBLIC_URL: 'https://example.com/app',
    });
    const refused = GrpoConfig.safeParse({
      model: { kind: 'tiny' },
      dataset: 'tools',
      command: { argv: ['node'], cwd: '/', env: { OPENAI_API_KEY: 'sk-1' } },
    });
    assert.ok(!refused.success);
    assert.match(
      refused.error.issues[0]!.message,
      /secrets are not stored with a run: set OPENAI_API_KEY in the environment/,
    );
    const byValue = GrpoConfig.safeParse({
      model: { kind: 'tiny' },
      dataset: 'tools',
      command: { argv: ['node'], cwd: '/', env: { DATABASE_URL: 'postgres://u:pw@db/app' } },
    });
    assert.ok(!byValue.success && /set DATABASE_URL in/.test(byValue.error.issues[0]!.message));
  });

  it('checks each typed setting with a message naming it', () => {
    assert.deepEqual(parseNumericSetting('iterations', ' 3 '), { ok: true, value: 3 });
    assert.deepEqual(parseNumericSetting('iterations', '2.5'), {
      ok: false,
      message: 'Iterations must be a whole number',
    });
    assert.deepEqual(parseNumericSetting('iterations', '0'), {
      ok: false,
      message: 'Iterations must be from 1 to 100000',
    });
    assert.match(
      (parseNumericSetting('samples', '1') as { message: string }).message,
      /Samples per task must be at least 2/,
    );
    assert.deepEqual(parseNumericSetting('lr', '3e-4'), { ok: true, value: 3e-4 });
    assert.deepEqual(parseNumericSetting('lr', 'fast'), { ok: false, message: 'Learning rate must be a number' });
    assert.deepEqual(parseNumericSetting('lr', '0'), {
      ok: false,
      message: 'Learning rate must be above 0 and at most 1',
    });
    assert.deepEqual(parseNumericSetting('lr', ''), { ok: false, message: 'Learning rate must be a number' });
    assert.equal(modelSpec('  ').ok, false);
    assert.deepEqual(modelSpec('my model'), { ok: false, message: '"my model" is not a model name (no spaces)' });
  });

  it('reports what the protocol refuses, naming the field', () => {
    const result = grpoConfig({
      model: { kind: 'tiny' },
      dataset: '',
      command: { ...agent, argv: [] },
      settings: { ...DEFAULT_SETTINGS, samples: 1 },
    });
    assert.equal(result.ok, false);
    const message = (result as { message: string }).message;
    assert.match(message, /config\.dataset/);
    assert.match(message, /config\.samples: samples must be at least 2/);
    assert.match(message, /config\.command\.argv/);
  });
});

const summary = (extra: Partial<Extract<TrainingRunSummary, { algorithm: 'grpo' }>> = {}): TrainingRunSummary => ({
  id: 'run-1',
  algorithm: 'grpo',
  config: testGrpoConfig({ iterations: 4 }),
  status: 'running',
  createdAt: 1,
  startedAt: 1,
  endedAt: null,
  error: null,
  errorKind: null,
  cancelRequested: false,
  result: null,
  step: 0,
  latest: {},
  ...extra,
});

describe('Start Training: following a run', () => {
  it('says where the run is and how far', () => {
    assert.equal(progressText(summary()), 'starting the trainer and the first rollouts…');
    assert.equal(progressText(summary({ latest: { 'val/reward': 0.25 } })), 'validation before training: 0.25');
    const second = summary({ step: 2, latest: { 'reward/mean': 0.5, 'reward/std': 0.125, 'val/reward': 0.75 } });
    assert.equal(progressText(second), 'iteration 2/4 · reward 0.5 ± 0.125 · val 0.75');
    assert.equal(progressFraction(second), 0.5);
    assert.equal(progressText(summary({ cancelRequested: true })), 'cancelling…');
  });

  it('ends with the outcome, and knows when the trainer needs setting up', () => {
    assert.equal(
      endText(summary({ status: 'succeeded', step: 4, latest: { 'reward/mean': 0.75, 'val/reward': 1 } })),
      'training run run-1 finished after 4 iteration(s): reward 0.75, validation 1.',
    );
    assert.match(
      endText(summary({ status: 'cancelled', step: 1 })),
      /cancelled after 1 iteration\(s\); its checkpoints are kept/,
    );
    assert.equal(endText(summary({ status: 'failed', error: 'boom' })), 'training run run-1 failed: boom');
    // The daemon says so with the run's error kind (no Python with PyTorch, a worker that cannot start or lacks torch:
    // test/unit/trainerUnavailable.test.ts); the editor reads no words: the same test Use Checkpoint makes.
    const noTorch = summary({
      status: 'failed',
      error: 'no Python with PyTorch found (tried /usr/bin/python3: …). Run `lightning doctor --setup`',
      errorKind: 'trainer_unavailable',
    });
    assert.ok(needsTrainerSetup(noTorch.errorKind));
    assert.ok(
      !needsTrainerSetup(
        summary({ status: 'failed', error: 'the agent exited 1 (run `lightning doctor`)', errorKind: 'internal' })
          .errorKind,
      ),
      'words are not read',
    );
    assert.ok(!needsTrainerSetup(null));
  });
});

const probe = (torch: string | null) => ({
  executable: '/usr/bin/python3',
  origin: 'system',
  version: '3.11.2',
  torch,
  problem: torch ? null : 'no torch',
});
const READY = {
  candidates: [probe('1.13.0a0')],
  chosen: probe('1.13.0a0'),
  report: {
    python: '3.11.2',
    executable: '/usr/bin/python3',
    torch: '1.13.0a0',
    device: 'cpu',
    cuda: null,
    transformers: null,
    peft: null,
    blas: 'openblas',
    pipReachesIndex: true,
    problems: [{ problem: 'transformers is not installed', fix: 'pip install transformers peft', optional: true }],
    ok: true,
  },
  problems: [{ problem: 'transformers is not installed', fix: 'pip install transformers peft', optional: true }],
};
const MISSING = {
  candidates: [probe(null)],
  chosen: null,
  report: null,
  problems: [{ problem: 'no Python with PyTorch', fix: 'run `lightning doctor --setup`' }],
};
/**
 * What `lightning doctor --json` prints: log lines may come first on stdout's earlier lines; the report is the last.
 */
const printed = (diagnosis: object): string => `${JSON.stringify(diagnosis)}\n`;

describe('Fine-tune on Good Rollouts: the answers become an SftConfig', () => {
  it('starts with the daemon’s own defaults: rollouts rated Good (1) or better, 10% held out, the lr by the model', () => {
    const result = sftConfig({ model: { kind: 'tiny' }, settings: DEFAULT_SFT_SETTINGS });
    assert.ok(result.ok);
    assert.deepEqual(result.value, SftConfig.parse({ algorithm: 'sft', model: { kind: 'tiny' } }));
    assert.deepEqual([result.value.minReward, result.value.valFraction, result.value.lr], [1, 0.1, null]);
    assert.equal(
      describeSftSettings(DEFAULT_SFT_SETTINGS, { kind: 'tiny' }),
      'rollouts rated ≥ 1 · 3 epochs · lr 0.001 (by the model) · 10% held out · device auto',
    );
    assert.match(
      describeSftSettings({ ...DEFAULT_SFT_SETTINGS, dataset: 'tools' }, { kind: 'hf', name: 'Qwen/Qwen2.5-0.5B' }),
      /^rollouts rated ≥ 1 of tools · 3 epochs · lr 0\.0002 \(by the model\)/,
    );
  });

  it('carries the chosen model and settings, and the retention setting', () => {
    const result = sftConfig({
      model: { kind: 'hf', name: '/models/qwen' },
      settings: { ...DEFAULT_SFT_SETTINGS, minReward: 0.5, dataset: 'tools', epochs: 5, lr: 1e-4, valFraction: 0 },
      keepCheckpoints: 'all',
    });
    assert.ok(result.ok);
    assert.deepEqual(
      [result.value.model, result.value.minReward, result.value.dataset, result.value.epochs, result.value.lr],
      [{ kind: 'hf', name: '/models/qwen' }, 0.5, 'tools', 5, 1e-4],
    );
    assert.equal(result.value.keepCheckpoints, 'all');
  });

  it('checks each typed setting with a message naming it; an empty learning rate is the model’s', () => {
    assert.deepEqual(parseSftSetting('lr', ' '), { ok: true, value: null });
    assert.deepEqual(parseSftSetting('minReward', '-1'), { ok: true, value: -1 });
    assert.deepEqual(parseSftSetting('minReward', 'good'), { ok: false, message: 'Minimum reward must be a number' });
    assert.deepEqual(parseSftSetting('epochs', '2.5'), {
      ok: false,
      message: 'Epochs must be a whole number from 1 to 1000',
    });
    assert.deepEqual(parseSftSetting('valFraction', '0.6'), {
      ok: false,
      message: 'Held out for validation must be from 0 to 0.5',
    });
    assert.deepEqual(parseSftSetting('lr', '0'), { ok: false, message: 'Learning rate must be above 0 and at most 1' });
    const refused = sftConfig({ model: { kind: 'tiny' }, settings: { ...DEFAULT_SFT_SETTINGS, epochs: 0 } });
    assert.ok(!refused.ok);
    assert.match(refused.message, /config\.epochs/);
  });

  it('follows an SFT run by epoch: loss, validation loss and accuracy', () => {
    const sft = (extra: Partial<TrainingRunSummary>): TrainingRunSummary =>
      ({
        ...summary(),
        algorithm: 'sft',
        config: SftConfig.parse({ algorithm: 'sft', model: { kind: 'tiny' }, epochs: 4 }),
        ...extra,
      }) as TrainingRunSummary;
    assert.equal(progressText(sft({})), 'loading the model and the rated rollouts…');
    assert.equal(
      progressText(sft({ latest: { 'val/loss': 2.5, 'val/accuracy': 0 } })),
      'before training: val loss 2.5 · val accuracy 0',
    );
    const second = sft({ step: 2, latest: { loss: 0.41, 'val/loss': 0.52, 'val/accuracy': 0.75 } });
    assert.equal(progressText(second), 'epoch 2/4 · loss 0.41 · val loss 0.52 · val accuracy 0.75');
    assert.equal(progressFraction(second), 0.5);
    assert.equal(
      endText(sft({ status: 'succeeded', step: 4, latest: { loss: 0.1, 'val/loss': 0.2, 'val/accuracy': 1 } })),
      'training run run-1 finished after 4 epoch(s): loss 0.1, validation loss 0.2, accuracy 1.',
    );
    assert.match(endText(sft({ status: 'cancelled', step: 1 })), /cancelled after 1 epoch\(s\)/);
  });
});

describe('Set Up Trainer: the doctor’s report (lightning doctor --json)', () => {
  it('reads a ready trainer, and that Hugging Face packages are missing', () => {
    const summary = doctorSummary(printed(READY), '');
    assert.deepEqual(
      { ...summary, text: undefined },
      {
        ready: true,
        headline: 'torch 1.13.0a0 (BLAS: openblas) on cpu',
        problem: undefined,
        hfMissing: true,
        aptCommand: undefined,
        text: undefined,
      },
    );
    assert.match(summary.text, /^Python {8}\/usr\/bin\/python3 \(system\) 3\.11\.2$/m);
    assert.match(summary.text, /The trainer is ready\.$/);
  });

  it('reads the first problem to fix, and the apt-get line when pip reached no index', () => {
    const notReady = doctorSummary(printed(MISSING), '');
    assert.deepEqual(
      [notReady.ready, notReady.problem, notReady.aptCommand, notReady.hfMissing],
      [false, 'no Python with PyTorch', undefined, true],
    );
    const apt = 'apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread';
    assert.equal(doctorSummary(printed({ ...MISSING, aptCommand: apt }), '').aptCommand, apt);
  });

  it('a CLI that printed no report is not ready, and says what the CLI said', () => {
    const broken = doctorSummary('', 'lightning: --store: no such folder\n');
    assert.equal(broken.ready, false);
    assert.equal(broken.problem, 'lightning doctor printed no report (lightning: --store: no such folder)');
    assert.equal(doctorSummary('{"candidates": 3}\n', '').ready, false, 'a report of another shape is refused');
  });
});

describe('Start Training: following a run to its end', () => {
  const run = (status: TrainingRunSummary['status'], id = 'run-1'): TrainingRunSummary => ({
    ...summary({ status }),
    id,
  });
  const setUp = (reads: Array<TrainingRunSummary | Error>) => {
    const changed = new Emitter<TrainingRunSummary>();
    const connected = new Emitter<unknown>();
    const seen: string[] = [];
    let read = 0;
    const ended = followRun(
      'run-1',
      { onDidChange: changed.event, onDidConnect: connected.event },
      {
        read: async () => {
          const next = reads[Math.min(read++, reads.length - 1)]!;
          if (next instanceof Error) throw next;
          return next;
        },
        progress: (r) => seen.push(`progress ${r.status}`),
        warn: (error) => seen.push(`warn ${(error as Error).message}`),
      },
    );
    return { changed, connected, seen, ended, reads: () => read };
  };
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  it('ends when a restarted daemon, which failed the run before anyone connected, is connected to; then it listens no more', async () => {
    const { changed, connected, seen, ended, reads } = setUp([run('running'), run('failed')]);
    await settle();
    changed.fire(run('succeeded', 'run-2'));
    changed.fire(run('running'));
    // The daemon crashed and its supervisor started another: no trainingRuns/changed about run-1 comes.
    connected.fire({});
    assert.equal((await ended).status, 'failed');
    assert.deepEqual(seen, ['progress running', 'progress running']);
    changed.fire(run('running'));
    connected.fire({});
    await settle();
    assert.deepEqual([seen.length, reads()], [2, 2], 'no listener is left after the end');
  });

  it('ends on the daemon’s notification, and reads again on the next connection after a failed read', async () => {
    const first = setUp([new Error('connection closed'), run('running')]);
    await settle();
    first.connected.fire({});
    await settle();
    first.changed.fire(run('cancelled'));
    assert.equal((await first.ended).status, 'cancelled');
    assert.deepEqual(first.seen, ['warn connection closed', 'progress running']);
    // A run that ended before the notification was listened to ends at the first read.
    assert.equal((await setUp([run('succeeded')]).ended).status, 'succeeded');
  });
});
