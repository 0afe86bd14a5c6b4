/**
 * **Lightning: Import Dataset** and **Lightning: Run Dataset**. Import hands a tasks.jsonl file (the
 * one given, the active editor's, or one picked) to `lightning dataset import`, so its errors name
 * the line and field exactly as the CLI's do. Run picks a dataset, a launch configuration (made into
 * a command by launchCommand.ts, without the debugger), samples and concurrency, and runs
 * `lightning dataset run --json` under a cancellable progress notification; the summary follows
 * (scoring errors counted, their lines in the Lightning log).
 */
import path from 'node:path';
import * as vscode from 'vscode';
import { Dataset, type ServedPolicy } from '../../trainer-daemon/protocol';
import type { DaemonSupervisor } from '../supervisor';
import {
  BatchProgressText,
  describeSummary,
  parseBatchFinished,
  parseProgressLine,
  scoringErrorLines,
} from './batchProgress';
import { cliError, type LightningCli } from './cliProcess';
import { commandEnvironment } from '../debug/launchCommand';
import { launchAgentChoices, pickAgent, pickNamed } from '../pickers';
import { checkpointArgs } from '../checkpoints/routing';
import { CheckpointUnavailableError, type CheckpointSource } from '../checkpoints/useCheckpoint';

export interface DatasetEvents {
  /** A dataset was imported: the panel's Datasets section refreshes. */
  datasetsChanged(): Promise<void>;
  /** A batch ran: the panel shows its rollouts. */
  showBatch(batchId: string): void;
}

/** Exit code of a CLI run stopped by SIGINT (the batch was cancelled). */
const CANCELLED_EXIT = 130;

export class DatasetCommands {
  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly cli: LightningCli,
    private readonly events: DatasetEvents,
    /** Use Checkpoint: a checkpoint in use answers the batch's LLM calls (`--checkpoint`). */
    private readonly checkpoint: CheckpointSource,
    /** The Lightning log: a batch's scoring errors. */
    private readonly log: vscode.LogOutputChannel,
    /** The last dataset and agent chosen, offered first. */
    private readonly memory: vscode.Memento,
  ) {}

  async importDataset(uri?: vscode.Uri): Promise<Dataset | undefined> {
    const file = uri ?? this.activeJsonl() ?? (await this.pickFile());
    if (!file) return undefined;
    const name = await vscode.window.showInputBox({
      title: `Import ${path.basename(file.fsPath)} as a dataset`,
      prompt: 'Dataset name',
      value: path.basename(file.fsPath).replace(/\.[^.]+$/, ''),
      validateInput: (text) =>
        text.trim() === '' ? 'The dataset needs a name' : text.length > 200 ? 'At most 200 characters' : undefined,
    });
    if (name === undefined) return undefined;
    await this.supervisor.ensureRunning();
    const run = await this.cli.run(['dataset', 'import', file.fsPath, '--name', name.trim(), '--json']);
    if (run.code !== 0) throw new Error(`cannot import ${cliError(run)}`);
    const dataset = parseDataset(run.stdout);
    await this.events.datasetsChanged();
    void vscode.window.showInformationMessage(
      `Lightning: imported ${dataset.taskCount} tasks as dataset ${dataset.name}.`,
    );
    return dataset;
  }

  private activeJsonl(): vscode.Uri | undefined {
    const document = vscode.window.activeTextEditor?.document;
    return document && document.uri.scheme === 'file' && /\.jsonl?$/i.test(document.fileName)
      ? document.uri
      : undefined;
  }

  private async pickFile(): Promise<vscode.Uri | undefined> {
    const picked = await vscode.window.showOpenDialog({
      title: 'Import a dataset (tasks.jsonl: one JSON object per line)',
      canSelectMany: false,
      filters: { 'JSON lines': ['jsonl', 'json'] },
    });
    return picked?.[0];
  }

  async runDataset(): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    const { items } = await client.request('listDatasets', {});
    if (items.length === 0) {
      void vscode.window.showInformationMessage(
        'Lightning: no datasets yet. Import a tasks.jsonl file with Lightning: Import Dataset.',
      );
      return;
    }
    const dataset = await pickNamed(
      items,
      (d) => d.name,
      (d) => ({ description: `${d.taskCount} tasks`, detail: d.source ?? undefined }),
      { title: 'Run Dataset (1/4): which dataset?', memory: this.memory, memoryKey: 'lightning.runDataset.dataset' },
    );
    if (!dataset) return;
    const choices = launchAgentChoices();
    if (choices.length === 0) {
      void vscode.window.showWarningMessage(
        'Lightning: no launch configuration to run the agent with. Add one to .vscode/launch.json.',
      );
      return;
    }
    const agent = await pickAgent(choices, {
      title: 'Run Dataset (2/4): which agent (launch configuration, run without the debugger)?',
      memory: this.memory,
      memoryKey: 'lightning.runDataset.agent',
    });
    if (!agent) return;
    const { name: configName, command } = agent;
    const samples = await askCount('Run Dataset (3/4): rollouts per task', '1');
    if (samples === undefined) return;
    const concurrency = await askCount('Run Dataset (4/4): agents running at once', '4');
    if (concurrency === undefined) return;
    // Loaded here, with its own progress and ways out, so the CLI finds it served.
    let served: ServedPolicy | null;
    try {
      served = await this.checkpoint.servedForRollout(client);
    } catch (error) {
      if (error instanceof CheckpointUnavailableError) return;
      throw error;
    }
    const args = [
      'dataset',
      'run',
      dataset.id,
      '--samples',
      String(samples),
      '--concurrency',
      String(concurrency),
      '--label',
      `${dataset.name} · ${configName}`,
      '--json',
      '--progress',
      'json',
      ...checkpointArgs(served),
      '--',
      ...command.argv,
    ];
    const title = `Lightning: running ${dataset.name} with ${configName}${served ? ` (checkpoint step ${served.step})` : ''}`;
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title, cancellable: true },
      async (progress, token) => {
        const text = new BatchProgressText();
        progress.report({ message: command.notes.length ? `starting (${command.notes.join('; ')})` : 'starting' });
        const run = await this.cli.run(args, {
          cwd: command.cwd,
          env: commandEnvironment(command, process.env),
          token,
          onStderrLine: (line) => {
            const event = parseProgressLine(line);
            if (!event) return;
            if (event.kind === 'batch') this.events.showBatch(event.batchId);
            const report = text.update(event);
            if (report) progress.report(report);
          },
        });
        const summary = parseBatchFinished(run.stdout);
        if (!summary) throw new Error(`the dataset run failed: ${cliError(run)}`);
        const cancelled = run.code === CANCELLED_EXIT || token.isCancellationRequested;
        this.events.showBatch(summary.batchId);
        const errors = scoringErrorLines(summary);
        for (const line of errors) this.log.error(`[dataset] batch ${summary.batchId}: ${line}`);
        const message = `Lightning: batch ${summary.batchId} ${describeSummary(summary, cancelled)}`;
        const actions = errors.length > 0 ? ['Show Logs'] : [];
        void (
          cancelled
            ? vscode.window.showWarningMessage(message, ...actions)
            : vscode.window.showInformationMessage(message, ...actions)
        ).then((choice) => {
          if (choice === 'Show Logs') this.log.show();
        });
      },
    );
  }
}

function parseDataset(stdout: string): Dataset {
  const line = stdout.trim().split('\n').at(-1) ?? '';
  let parsed: ReturnType<typeof Dataset.safeParse> | undefined;
  try {
    parsed = Dataset.safeParse(JSON.parse(line));
  } catch {
    parsed = undefined;
  }
  if (!parsed?.success) throw new Error(`unexpected output from lightning dataset import: ${line.slice(0, 200)}`);
  return parsed.data;
}

async function askCount(title: string, value: string): Promise<number | undefined> {
  const text = await vscode.window.showInputBox({
    title,
    value,
    validateInput: (input) => (/^\s*[1-9]\d{0,3}\s*$/.test(input) ? undefined : 'A whole number from 1 to 9999'),
  });
  return text === undefined ? undefined : Number(text.trim());
}
