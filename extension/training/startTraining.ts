/**
 * **Lightning: Start Training**, **Cancel Training** and **Resume Training**. Start asks, in quick picks, for the
 * algorithm (APO hands off to Optimize This Prompt, which starts its run the same way; Fine-tune on Good Rollouts asks
 * for the model and its settings: fineTune.ts), then the base model, the dataset, the agent (a launch configuration
 * run as a command, without the debugger: debug/launchCommand.ts, picked with pickers.ts) and the settings (start
 * with the defaults, or change one at a time; remembered per workspace; a Hugging Face model may train several
 * policies, picked from the dataset's recorded agent names: policyPicks.ts), then sends `training/start` to the daemon,
 * which drives the run. A run is followed in a progress
 * notification whose Cancel sends `trainingRuns/cancel`, and shown in the panel as it goes.
 */
import * as vscode from 'vscode';
import type {
  DaemonTrainingConfig,
  ModelSpec,
  PolicySpecInput,
  TrainingAlgorithm,
  TrainingRunSummary,
} from '../../trainer-daemon/protocol';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import { assertNever } from '../../trainer-daemon/protocol/assert';
import { isResumable } from '../../trainer-daemon/protocol/status';
import type { DaemonClient } from '../daemonClient';
import { datasetRows } from '../datasets/panelData';
import type { AgentCommand } from '../debug/launchCommand';
import { launchAgentChoices, pickAgent, pickNamed } from '../pickers';
import { readSettings } from '../settings';
import type { DaemonSupervisor } from '../supervisor';
import type { TrainingRuns } from '../trainingRuns';
import {
  DEFAULT_SETTINGS,
  describeSettings,
  grpoConfig,
  NUMERIC_SETTINGS,
  parseNumericSetting,
  storableEnv,
  type GrpoSettings,
  type NumericSetting,
} from './grpoSettings';
import { followDaemonRun } from './followRun';
import { inEditorWords, needsTrainerSetup } from '../../trainer-daemon/protocol/setupAdvice';
import { endText, progressFraction, progressText } from './runText';
import { fineTuneConfig } from './fineTune';
import { pick, pickModel } from './trainingPicks';
import { describePolicies, policiesFromPicks, policyPickItems } from './policyPicks';

const TITLE = 'Lightning: Start Training';
const MEMORY = {
  settings: 'lightning.grpo.settings',
  dataset: 'lightning.grpo.dataset',
  agent: 'lightning.grpo.agent',
} as const;

export interface TrainingUi {
  /** Opens the panel on this run. */
  revealRun(runId: string): Promise<void>;
}

export class TrainingCommands {
  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly runs: TrainingRuns,
    private readonly ui: TrainingUi,
    private readonly log: vscode.LogOutputChannel,
    /** The workspace's last choices. */
    private readonly memory: vscode.Memento,
  ) {}

  async start(): Promise<void> {
    const algorithm = await pick<TrainingAlgorithm>(
      [
        {
          label: 'GRPO',
          description: 'reinforcement learning of a local model (the policy serves the agent’s LLM calls)',
          value: 'grpo',
        },
        {
          label: 'Fine-tune on Good Rollouts',
          description: 'supervised fine-tuning (SFT) of a local model on the rollouts you rated good',
          value: 'sft',
        },
        { label: 'APO', description: 'prompt optimization against a hosted model: Optimize This Prompt', value: 'apo' },
      ],
      `${TITLE} (1/5): algorithm`,
    );
    switch (algorithm) {
      case undefined:
        return;
      case 'apo':
        // Its picks start from a prompt in the editor; it starts the run through training/start as well.
        await vscode.commands.executeCommand('lightning.optimizePrompt');
        return;
      case 'sft': {
        const client = await this.supervisor.ensureRunning();
        const config = await fineTuneConfig(client, this.memory);
        if (config) await this.launch({ config });
        return;
      }
      case 'grpo':
        return this.startGrpo();
      default:
        return assertNever(algorithm);
    }
  }

  /** GRPO's picks: the base model, the dataset, the agent and the settings. */
  private async startGrpo(): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    const model = await pickModel(this.memory, `${TITLE} (2/5): base model`);
    if (!model) return;
    const dataset = await this.pickDataset();
    if (!dataset) return;
    const agent = await this.pickAgent();
    if (!agent) return;
    const chosen = await this.chooseSettings(client, model, dataset);
    if (!chosen) return;
    const { settings, policies } = chosen;
    const keep = readSettings().keepCheckpoints;
    if (typeof keep === 'object')
      throw new Error(`cannot start training: the lightning.training.keepCheckpoints setting: ${keep.error}`);
    const config = grpoConfig({
      model,
      dataset,
      command: agent,
      settings,
      policies,
      ...(keep === undefined ? {} : { keepCheckpoints: keep }),
    });
    if (!config.ok) throw new Error(`cannot start training: ${config.message}`);
    const omitted = storableEnv(agent.env).omitted;
    if (omitted.length)
      this.log.warn(`[training] left out of the run's environment (secrets are not stored): ${omitted.join(', ')}`);
    await this.launch({ config: config.value });
  }

  /** **Resume Training**: a cancelled or failed GRPO or SFT run continues from its last checkpoint. */
  async resume(runId?: string): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    const id =
      runId ??
      (await this.pickRun(
        client,
        isResumable,
        'Resume Training: which run? (it continues from its last checkpoint)',
        'No cancelled or failed GRPO or SFT run to resume.',
      ));
    if (id) await this.launch({ resume: id });
  }

  /** **Cancel Training**: a running run stops now (its agents, and trainer worker, with it). */
  async cancel(runId?: string): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    const id =
      runId ??
      (await this.pickRun(
        client,
        (run) => run.status === 'running' || run.status === 'queued',
        'Cancel Training: which run?',
        'No training run is running.',
      ));
    if (!id) return;
    const run = await client.request('cancelTrainingRun', { id });
    void vscode.window.showInformationMessage(
      `Lightning: training run ${run.id} ${run.status === 'cancelled' ? 'cancelled' : 'will stop at its next step'}.`,
    );
  }

  /** Starts the run on the daemon's connection now: it may have restarted while the picks were open. */
  private async launch(start: { config: DaemonTrainingConfig } | { resume: string }): Promise<void> {
    const run = await (await this.supervisor.ensureRunning()).request('startTraining', start);
    this.log.info(`[training] run ${run.id} ${'resume' in start ? 'resumed' : 'started'}`);
    await this.ui.revealRun(run.id);
    void this.follow(run.id).catch((error: unknown) =>
      this.log.error(`[training] following ${run.id}: ${errorMessage(error)}`),
    );
  }

  /** A progress notification until the run ends (Cancel cancels it; followRun.ts), then its outcome with a way on. */
  private async follow(runId: string): Promise<void> {
    const final = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Lightning: training ${runId}`, cancellable: true },
      async (progress, token) => {
        let done = 0;
        const report = (run: TrainingRunSummary): void => {
          const fraction = progressFraction(run);
          progress.report({ message: progressText(run), increment: Math.max(0, 100 * (fraction - done)) });
          done = Math.max(done, fraction);
        };
        const ended = followDaemonRun(runId, this.supervisor, this.runs.onDidChange, {
          progress: report,
          warn: (error) => this.log.warn(`[training] cannot read run ${runId}: ${errorMessage(error)}`),
        });
        const cancel = token.onCancellationRequested(() => {
          progress.report({ message: 'cancelling…' });
          void this.supervisor
            .ensureRunning()
            .then((client) => client.request('cancelTrainingRun', { id: runId }))
            .catch((error: unknown) => this.log.error(`[training] cannot cancel ${runId}: ${errorMessage(error)}`));
        });
        try {
          return await ended;
        } finally {
          cancel.dispose();
        }
      },
    );
    await this.tellEnd(final);
  }

  private async tellEnd(run: TrainingRunSummary): Promise<void> {
    const text = `Lightning: ${inEditorWords(endText(run))}`;
    this.log.info(`[training] ${endText(run)}`);
    if (run.status === 'failed') {
      const setup = needsTrainerSetup(run.errorKind);
      const choice = await vscode.window.showErrorMessage(
        text,
        ...(setup ? ['Set Up Trainer'] : ['Resume']),
        'Show Logs',
      );
      if (choice === 'Set Up Trainer') await vscode.commands.executeCommand('lightning.setUpTrainer');
      if (choice === 'Resume') await vscode.commands.executeCommand('lightning.resumeTraining', run.id);
      if (choice === 'Show Logs') this.log.show();
    } else if (run.status === 'cancelled') {
      if ((await vscode.window.showWarningMessage(text, 'Resume')) === 'Resume')
        await vscode.commands.executeCommand('lightning.resumeTraining', run.id);
    } else if ((await vscode.window.showInformationMessage(text, 'Show Run')) === 'Show Run')
      await this.ui.revealRun(run.id);
  }

  private async pickRun(
    client: DaemonClient,
    wanted: (run: TrainingRunSummary) => boolean,
    title: string,
    none: string,
  ): Promise<string | undefined> {
    const runs = (await client.request('listTrainingRuns', { limit: 50 })).items.filter(wanted);
    if (runs.length === 0) {
      void vscode.window.showInformationMessage(`Lightning: ${none}`);
      return undefined;
    }
    return pick(
      runs.map((run) => ({
        label: run.id,
        description: `${run.algorithm} · ${run.status} · iteration ${run.step}`,
        detail: run.error ?? undefined,
        value: run.id,
      })),
      title,
    );
  }

  private async pickDataset(): Promise<string | undefined> {
    const rows = await datasetRows(this.supervisor);
    if (rows.length === 0) {
      const choice = await vscode.window.showInformationMessage(
        'Lightning: no dataset to train on yet. Import a tasks.jsonl file (tasks with "split": "train", and "val" ones to validate on).',
        'Import Dataset',
      );
      if (choice) await vscode.commands.executeCommand('lightning.importDataset');
      return undefined;
    }
    const row = await pickNamed(
      rows,
      (r) => r.dataset.name,
      (r) => ({
        description: `${r.splits.train} train · ${r.splits.val} val tasks`,
        detail: r.splits.train === 0 ? '$(warning) no train tasks: training samples the train split' : undefined,
      }),
      { title: `${TITLE} (3/5): dataset`, memory: this.memory, memoryKey: MEMORY.dataset },
    );
    if (!row) return undefined;
    if (row.splits.train === 0)
      throw new Error(
        `dataset ${row.dataset.name} has no train tasks: import tasks with "split": "train" (its ${row.dataset.taskCount} tasks are ${row.splits.val} val, ${row.splits.test} test)`,
      );
    return row.dataset.name;
  }

  private async pickAgent(): Promise<AgentCommand | undefined> {
    const choices = launchAgentChoices();
    if (choices.length === 0)
      throw new Error(
        'no launch configuration runs the agent: add a Node or Python launch configuration to .vscode/launch.json',
      );
    return (
      await pickAgent(choices, {
        title: `${TITLE} (4/5): the agent (a launch configuration, run without the debugger, once per rollout)`,
        memory: this.memory,
        memoryKey: MEMORY.agent,
      })
    )?.command;
  }

  /**
   * The policies of a run with several (one LoRA adapter each): the names the dataset's newest rollouts' calls went
   * by, agents first, the current ones ticked; none ticked trains one adapter on every call. Undefined: dismissed.
   */
  private async pickPolicies(
    client: DaemonClient,
    dataset: string,
    current: readonly PolicySpecInput[],
  ): Promise<PolicySpecInput[] | undefined> {
    const seen = await client.request('datasetAgents', { dataset });
    const items = policyPickItems(seen);
    if (items.length === 0) {
      void vscode.window.showInformationMessage(
        `Lightning: no calls in ${dataset}'s rollouts name an agent or a model yet (${seen.rollouts} rollouts read). Run the agent on the dataset first (Run Dataset), with its agent's name in an OpenTelemetry agent span or the W3C baggage header (gen_ai.agent.name), or give each policy a REGEX with lightning train --policy NAME=REGEX.`,
      );
      return undefined;
    }
    const ticked = new Set(current.map((p) => p.match));
    const chosen = await vscode.window.showQuickPick(
      items.map((item) => ({ ...item, picked: ticked.has(policiesFromPicks([item.pick])[0]!.match) })),
      {
        title: `${TITLE}: policies — tick each role to train with an adapter of its own (calls of the others: the base model, not trained)`,
        canPickMany: true,
        ignoreFocusOut: true,
        matchOnDescription: true,
      },
    );
    return chosen && policiesFromPicks(chosen.map((item) => item.pick));
  }

  /**
   * "Start" with the current settings, or change one at a time (the list comes back after each). A Hugging Face model
   * may train several policies, one LoRA adapter each, picked from the names the dataset's recorded calls went by.
   */
  private async chooseSettings(
    client: DaemonClient,
    model: ModelSpec,
    dataset: string,
  ): Promise<{ settings: GrpoSettings; policies: PolicySpecInput[] } | undefined> {
    let settings: GrpoSettings = { ...DEFAULT_SETTINGS, ...this.memory.get<Partial<GrpoSettings>>(MEMORY.settings) };
    // Not remembered: which names a run can route by depends on its dataset's rollouts.
    let policies: PolicySpecInput[] = [];
    type Choice = 'start' | NumericSetting | 'valDataset' | 'device' | 'policies';
    for (;;) {
      const choice = await pick<Choice>(
        [
          {
            label: '$(play) Start training',
            description: `${describeSettings(settings)}${policies.length ? ` · policies ${policies.map((p) => p.name).join(', ')}` : ''}`,
            value: 'start',
          },
          ...(Object.keys(NUMERIC_SETTINGS) as NumericSetting[]).map((key) => ({
            label: NUMERIC_SETTINGS[key].label,
            description: String(settings[key]),
            detail: NUMERIC_SETTINGS[key].detail,
            value: key,
          })),
          {
            label: 'Validation',
            description: settings.valDataset ?? `the val split of ${dataset}`,
            detail: 'evaluated before the first iteration, every 5, and after the last',
            value: 'valDataset',
          },
          {
            label: 'Device',
            description: settings.device,
            detail: 'auto: the GPU when CUDA is available, else the CPU',
            value: 'device',
          },
          ...(model.kind === 'hf'
            ? [
                {
                  label: 'Policies',
                  description: describePolicies(policies),
                  detail:
                    "several roles, one LoRA adapter each: picked from the agent names and models of the dataset's rollouts",
                  value: 'policies' as const,
                },
              ]
            : []),
        ],
        `${TITLE} (5/5): settings — start, or change one`,
      );
      if (!choice) return undefined;
      if (choice === 'start') {
        await this.memory.update(MEMORY.settings, settings);
        return { settings, policies };
      }
      if (choice === 'policies') {
        policies = (await this.pickPolicies(client, dataset, policies)) ?? policies;
        continue;
      }
      if (choice === 'valDataset') {
        const { items } = await client.request('listDatasets', {});
        const value = await pick<string | null>(
          [
            { label: `val split of ${dataset}`, value: null },
            ...items
              .filter((d) => d.name !== dataset)
              .map((d) => ({
                label: d.name,
                description: `its val split, or all ${d.taskCount} tasks`,
                value: d.name,
              })),
          ],
          `${TITLE}: validation tasks`,
        );
        if (value !== undefined) settings = { ...settings, valDataset: value };
      } else if (choice === 'device') {
        const value = await pick<GrpoSettings['device']>(
          (['auto', 'cpu', 'cuda'] as const).map((device) => ({ label: device, value: device })),
          `${TITLE}: device`,
        );
        if (value) settings = { ...settings, device: value };
      } else {
        const key = choice;
        const text = await vscode.window.showInputBox({
          title: `${TITLE}: ${NUMERIC_SETTINGS[key].label}`,
          prompt: NUMERIC_SETTINGS[key].detail,
          value: String(settings[key]),
          ignoreFocusOut: true,
          validateInput: (input) => {
            const parsed = parseNumericSetting(key, input);
            return parsed.ok ? undefined : parsed.message;
          },
        });
        const parsed = text === undefined ? undefined : parseNumericSetting(key, text);
        if (parsed?.ok) settings = { ...settings, [key]: parsed.value };
      }
    }
  }
}
