/**
 * **Lightning: Optimize This Prompt**: the prompt under the cursor (a selection, a string literal,
 * or a whole prompt file) becomes a versioned resource, then quick picks choose the dataset, the
 * validation tasks, the agent (a launch configuration run as a command, without the debugger) and
 * APO's settings (laptop defaults; Advanced… for each). The daemon runs it (`training/start`, as Start Training's
 * GRPO and SFT runs), followed under a cancellable progress notification through the runs' notifications
 * (training/followRun.ts). The result is shown as a diff (promptResult.ts).
 */
import * as vscode from 'vscode';
import { ResourceName, type ApoConfig, type Dataset } from '../../trainer-daemon/protocol';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import { assertNever } from '../../trainer-daemon/protocol/assert';
import type { DaemonClient } from '../daemonClient';
import type { DaemonSupervisor } from '../supervisor';
import type { AgentCommand } from '../debug/launchCommand';
import { launchAgentChoices, pickAgent, pickNamed } from '../pickers';
import { followDaemonRun } from '../training/followRun';
import { progressText } from '../training/runText';
import type { TrainingRuns } from '../trainingRuns';
import type { PromptResults } from './promptResult';
import { defaultResourceName, isPromptFile, promptTarget, type PromptTarget } from './promptTarget';
import {
  apoConfig,
  apoStartEnv,
  describeSettings,
  LAPTOP_DEFAULTS,
  parseSetting,
  SETTING_INFO,
  type ApoSettings,
} from './apoSettings';

const TITLE = 'Lightning: Optimize This Prompt';
const SETTINGS_KEY = 'lightning.apo.settings';

export class OptimizePrompt {
  constructor(
    private readonly supervisor: DaemonSupervisor,
    /** The runs' changes (`trainingRuns/changed`), which the progress notification follows. */
    private readonly runs: TrainingRuns,
    private readonly log: vscode.LogOutputChannel,
    private readonly results: PromptResults,
    /** The workspace's last choices. */
    private readonly memory: vscode.Memento,
  ) {}

  async run(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor)
      throw new Error(
        'open the file with the prompt first: select it, put the cursor in its string literal, or open a prompt file',
      );
    const document = editor.document;
    const target = promptTarget(
      document.getText(),
      { start: document.offsetAt(editor.selection.start), end: document.offsetAt(editor.selection.end) },
      isPromptFile(document.fileName, document.languageId),
    );
    if (!target)
      throw new Error(
        'no prompt here: select the prompt text, put the cursor inside its string literal, or run this on a prompt file (.txt, .md, .prompt)',
      );
    // The agent may load a prompt file from disk, and APO seeds from what is on disk.
    if (target.wholeFile && document.isDirty) await document.save();
    const client = await this.supervisor.ensureRunning();

    const resource = await this.askName(client, target, document);
    if (!resource) return;
    const dataset = await this.pickDataset(client);
    if (!dataset) return;
    const valDataset = await this.pickValidation(client, dataset);
    if (valDataset === undefined) return;
    const folder = vscode.workspace.getWorkspaceFolder(document.uri) ?? vscode.workspace.workspaceFolders?.[0];
    const agent = await this.pickAgent(folder);
    if (!agent) return;
    const settings = await this.chooseSettings();
    if (!settings) return;
    await this.memory.update(SETTINGS_KEY, settings);
    await this.storePrompt(client, resource, target.prompt);

    const config = apoConfig({
      resource,
      dataset: dataset.name,
      valDataset,
      settings,
      promptFile: target.wholeFile && document.uri.scheme === 'file' ? document.uri.fsPath : null,
      agent,
      processEnv: process.env,
    });
    if (!config.ok) throw new Error(`cannot optimize the prompt: ${config.message}`);
    const run = await client.request('startTraining', { config: config.value, env: apoStartEnv(agent) });
    this.log.info(`[apo] run ${run.id} started: ${resource} on ${dataset.name}`);
    this.results.remember(run.id, { uri: document.uri, location: target.location });
    await this.follow(run.id, config.value);
  }

  private async askName(
    client: DaemonClient,
    target: PromptTarget,
    document: vscode.TextDocument,
  ): Promise<string | undefined> {
    const existing = (await client.request('listResources', {})).items.map((item) => item.name);
    const suggested = defaultResourceName(document.getText(), target.location.start, document.fileName);
    return vscode.window.showInputBox({
      title: `${TITLE} (1/5): resource name`,
      prompt: `The agent reads the prompt under this name (GET $LIGHTNING_URL/resources or LIGHTNING_RESOURCES).${existing.length ? ` Existing: ${existing.join(', ')}` : ''}`,
      value: suggested,
      ignoreFocusOut: true,
      validateInput: (value) => {
        const parsed = ResourceName.safeParse(value);
        return parsed.success ? undefined : parsed.error.issues[0]?.message;
      },
    });
  }

  /** A new version of the resource unless its current version is this prompt already. */
  private async storePrompt(client: DaemonClient, name: string, prompt: string): Promise<void> {
    const exists = (await client.request('listResources', {})).items.some((item) => item.name === name);
    if (exists && (await client.request('getResource', { name })).resource.value === prompt) return;
    const version = await client.request('putResource', { name, kind: 'prompt_template', value: prompt });
    this.log.info(`[apo] stored ${name} version ${version.version}`);
  }

  private async pickDataset(client: DaemonClient): Promise<Dataset | undefined> {
    const { items } = await client.request('listDatasets', {});
    if (items.length === 0)
      throw new Error(
        'no dataset in the store: import the tasks to optimize on first (`npx lightning dataset import tasks.jsonl --name NAME`)',
      );
    return pickNamed(
      items,
      (dataset) => dataset.name,
      (dataset) => ({ description: `${dataset.taskCount} tasks` }),
      {
        title: `${TITLE} (2/5): training tasks`,
        placeHolder: 'Which dataset? (its train split, or all of it when it has none)',
        memory: this.memory,
        memoryKey: 'lightning.apo.dataset',
      },
    );
  }

  /** null: the dataset's own val split; undefined: cancelled. */
  private async pickValidation(client: DaemonClient, dataset: Dataset): Promise<string | null | undefined> {
    const [own, { items }] = await Promise.all([
      client.request('listTasks', { dataset: dataset.name, split: 'val' }),
      client.request('listDatasets', {}),
    ]);
    const picks = [
      { label: `val split of ${dataset.name}`, description: `${own.items.length} tasks`, value: null as string | null },
      ...items
        .filter((other) => other.id !== dataset.id)
        .map((other) => ({
          label: other.name,
          description: `its val split, or all ${other.taskCount} tasks`,
          value: other.name,
        })),
    ];
    const pick = await vscode.window.showQuickPick(picks, {
      title: `${TITLE} (3/5): validation tasks`,
      placeHolder: 'Candidates are scored on these',
      ignoreFocusOut: true,
    });
    return pick?.value;
  }

  private async pickAgent(folder: vscode.WorkspaceFolder | undefined): Promise<AgentCommand | undefined> {
    const choices = launchAgentChoices(folder);
    if (!choices.some(({ result }) => result.ok)) {
      const why = choices
        .map(({ result }) => (result.ok ? '' : result.message))
        .filter(Boolean)
        .join('; ');
      throw new Error(
        `no launch configuration runs the agent as a command${why ? ` (${why})` : ''}: add a Node or Python launch configuration to .vscode/launch.json`,
      );
    }
    return (
      await pickAgent(choices, {
        title: `${TITLE} (4/5): the agent`,
        placeHolder: 'Which launch configuration runs the agent? (run without the debugger, once per task)',
        memory: this.memory,
        memoryKey: 'lightning.apo.agent',
      })
    )?.command;
  }

  /** "Start" with the current settings, or Advanced… to change one at a time. */
  private async chooseSettings(): Promise<ApoSettings | undefined> {
    let settings: ApoSettings = { ...LAPTOP_DEFAULTS, ...this.memory.get<Partial<ApoSettings>>(SETTINGS_KEY) };
    for (;;) {
      const pick = await vscode.window.showQuickPick(
        [
          { label: '$(play) Start optimizing', description: describeSettings(settings), advanced: false },
          {
            label: '$(settings) Advanced…',
            description: 'beam, branch, rounds, batches, budgets, models',
            advanced: true,
          },
        ],
        { title: `${TITLE} (5/5): settings`, ignoreFocusOut: true },
      );
      if (!pick) return undefined;
      if (!pick.advanced) return settings;
      const keys = Object.keys(SETTING_INFO) as (keyof ApoSettings)[];
      const item = await vscode.window.showQuickPick(
        keys.map((key) => ({
          label: SETTING_INFO[key].label,
          description: String(settings[key]),
          detail: SETTING_INFO[key].detail,
          key,
        })),
        { title: `${TITLE}: advanced settings`, placeHolder: 'Change which setting?', ignoreFocusOut: true },
      );
      if (!item) continue;
      const text = await vscode.window.showInputBox({
        title: `${TITLE}: ${SETTING_INFO[item.key].label}`,
        value: String(settings[item.key]),
        ignoreFocusOut: true,
        validateInput: (value) => {
          const parsed = parseSetting(item.key, value);
          return parsed.ok ? undefined : parsed.message;
        },
      });
      const parsed = text === undefined ? undefined : parseSetting(item.key, text);
      if (parsed?.ok) settings = { ...settings, [item.key]: parsed.value };
    }
  }

  /** A progress notification until the run ends (Cancel cancels it), then its diff, or why there is none. */
  private async follow(runId: string, config: ApoConfig): Promise<void> {
    const final = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Lightning: optimizing "${config.resource}"`,
        cancellable: true,
      },
      async (progress, token) => {
        progress.report({ message: `run ${runId} started: scoring the original prompt…` });
        const ended = followDaemonRun(runId, this.supervisor, this.runs.onDidChange, {
          progress: (run) => progress.report({ message: progressText(run) }),
          warn: (error) => this.log.warn(`[apo] cannot read run ${runId}: ${errorMessage(error)}`),
        });
        const cancel = token.onCancellationRequested(() => {
          progress.report({ message: 'cancelling…' });
          void this.supervisor
            .ensureRunning()
            .then((client) => client.request('cancelTrainingRun', { id: runId }))
            .catch((error: unknown) => this.log.error(`[apo] cannot cancel ${runId}: ${errorMessage(error)}`));
        });
        try {
          return await ended;
        } finally {
          cancel.dispose();
        }
      },
    );
    switch (final.algorithm) {
      case 'apo':
        break;
      case 'grpo':
      case 'sft':
        throw new Error(`training run ${final.id} is a ${final.algorithm} run, not the prompt optimization started`);
      default:
        return assertNever(final);
    }
    if (final.result) {
      this.log.info(
        `[apo] run ${runId} ${final.result.stopReason}: ${final.result.seed.valScore} → ${final.result.best.valScore}`,
      );
      await this.results.show(final.result);
    } else if (final.status === 'cancelled')
      void vscode.window.showInformationMessage(
        `Lightning: optimization of "${config.resource}" cancelled before the original prompt was scored.`,
      );
    else throw new Error(`prompt optimization run ${runId} ${final.status}: ${final.error ?? 'no message'}`);
  }
}
