/**
 * The extension's entry point. Activation is lazy (package.json `activationEvents`: the commands,
 * the panel, debug sessions): it wires services and registers commands, and does no other work —
 * the daemon starts on first use (the panel opening, a command, a Debug with Lightning launch).
 */
import * as vscode from 'vscode';
import { Annotator } from './annotate';
import { OptimizePrompt } from './apo/optimizePrompt';
import { PromptResults } from './apo/promptResult';
import { DebugWithLightning } from './debug/debugWithLightning';
import { debugPreloads } from './debug/preloadFiles';
import { LiveRollouts } from './liveRollouts';
import { PANEL_VIEW_ID, RolloutsPanel } from './panel';
import { affectsDaemon, UpstreamKey } from './settings';
import { LightningStatusBar } from './statusBar';
import { TrainingRuns } from './trainingRuns';
import { DaemonSupervisor } from './supervisor';
import { LightningCli } from './datasets/cliProcess';
import { DatasetCommands } from './datasets/datasetCommands';
import { ScoreCommand } from './rewards/scoreCommand';
import { TrainingCommands } from './training/startTraining';
import { TrainerSetup } from './training/setUpTrainer';
import { CheckpointInUse } from './checkpoints/useCheckpoint';
import { exportCheckpointCommand } from './checkpoints/exportCheckpoint';
import { deleteCheckpointCommand } from './checkpoints/deleteCheckpoint';
import { errorMessage } from '../trainer-daemon/protocol/errors';
import { WINDOWS_MESSAGE, WSL_DOCS } from './runtime';
import { runDemo } from './demo';
import { DetailEditors } from './editors/detailEditors';

export function activate(context: vscode.ExtensionContext): void {
  const started = performance.now();
  const log = vscode.window.createOutputChannel('Lightning', { log: true });
  // Native Windows is not supported (process groups, signals, the trainer worker): say so once, up front. In WSL the
  // extension runs on Linux.
  if (process.platform === 'win32') {
    void vscode.window
      .showErrorMessage(WINDOWS_MESSAGE, 'Open the WSL guide')
      .then((choice) => choice && vscode.env.openExternal(vscode.Uri.parse(WSL_DOCS)));
  }
  const upstreamKey = new UpstreamKey(context.secrets);
  const supervisor = new DaemonSupervisor(
    context.asAbsolutePath('dist/cli.js'),
    log,
    upstreamKey,
    String((context.extension.packageJSON as { version?: unknown }).version),
  );
  const live = new LiveRollouts(supervisor);
  const annotator = new Annotator(live, log);
  const checkpoint = new CheckpointInUse(supervisor, context.workspaceState, log);
  // Only preloads that exist: a missing `--require` file would stop every Node debuggee at its start.
  const { preloads, missing } = debugPreloads(context.extensionPath);
  if (missing.length > 0)
    log.warn(
      `[debug] debuggees go without these preloads, not found (npm run build makes them): ${missing.join(', ')}`,
    );
  const debug = new DebugWithLightning(supervisor, log, preloads, upstreamKey, checkpoint);
  const promptResults = new PromptResults(supervisor, log);
  const trainingRuns = new TrainingRuns(supervisor, (run) => promptResults.showRun(run));
  const editors = new DetailEditors(context.extensionUri, live, annotator, trainingRuns, log);
  const panel = new RolloutsPanel(context.extensionUri, live, annotator, log, trainingRuns, editors);
  const datasets = new DatasetCommands(
    supervisor,
    new LightningCli(context.asAbsolutePath('dist/cli.js'), log),
    panel,
    checkpoint,
    log,
    context.workspaceState,
  );
  const score = new ScoreCommand(live, log);
  const restartOwnDaemon = (): void => {
    if (supervisor.state.kind === 'running' && !supervisor.state.owned) return;
    if (supervisor.state.kind !== 'stopped') void supervisor.restart().catch(() => undefined);
  };
  const command = (id: string, run: (...args: unknown[]) => unknown): vscode.Disposable =>
    vscode.commands.registerCommand(id, async (...args: unknown[]) => {
      try {
        await run(...args);
      } catch (error) {
        const message = errorMessage(error);
        log.error(`[command] ${id}: ${message}`);
        void vscode.window
          .showErrorMessage(`Lightning: ${message}`, 'Show Logs')
          .then((choice) => choice && log.show());
      }
    });
  context.subscriptions.push(
    log,
    supervisor,
    live,
    debug,
    panel,
    new LightningStatusBar(live),
    vscode.window.registerWebviewViewProvider(PANEL_VIEW_ID, panel, {
      webviewOptions: { retainContextWhenHidden: true },
    }),
    debug.onDidFinishRollout((id) => (annotator.lastFinishedId = id)),
    command('lightning.showLogs', () => log.show()),
    command('lightning.showPanel', () => vscode.commands.executeCommand(`${PANEL_VIEW_ID}.focus`)),
    command('lightning.debugWithLightning', () => debug.run()),
    command('lightning.annotateReward', () => annotator.annotateCommand()),
    command('lightning.reviewUnrated', () => annotator.reviewUnrated()),
    command('lightning.setUpstreamApiKey', () => upstreamKey.prompt()),
    command('lightning.restartDaemon', () => supervisor.restart()),
    command('lightning.runDemo', () => runDemo(context.asAbsolutePath('dist/cli.js'))),
    command('lightning.importDataset', (uri) => datasets.importDataset(uri instanceof vscode.Uri ? uri : undefined)),
    command('lightning.runDataset', () => datasets.runDataset()),
    command('lightning.scoreRollouts', () => score.run()),
    upstreamKey.onDidChange(restartOwnDaemon),
    vscode.workspace.onDidChangeConfiguration((event) => affectsDaemon(event) && restartOwnDaemon()),
  );
  const optimize = new OptimizePrompt(supervisor, trainingRuns, log, promptResults, context.workspaceState);
  context.subscriptions.push(
    trainingRuns,
    promptResults,
    command('lightning.optimizePrompt', () => optimize.run()),
  );
  const training = new TrainingCommands(supervisor, trainingRuns, panel, log, context.workspaceState);
  const trainerSetup = new TrainerSetup(new LightningCli(context.asAbsolutePath('dist/cli.js'), log), log);
  const runId = (arg: unknown): string | undefined => (typeof arg === 'string' ? arg : undefined);
  context.subscriptions.push(
    command('lightning.startTraining', () => training.start()),
    command('lightning.cancelTraining', (id) => training.cancel(runId(id))),
    command('lightning.resumeTraining', (id) => training.resume(runId(id))),
    command('lightning.setUpTrainer', () => trainerSetup.run()),
  );
  context.subscriptions.push(
    editors,
    command('lightning.openRollout', (id) => editors.openRolloutCommand(id)),
    command('lightning.compareRollouts', (ids) => editors.compareCommand(ids)),
    command('lightning.openTrainingRun', (id) => editors.openRunCommand(id)),
  );
  context.subscriptions.push(
    checkpoint,
    command('lightning.useCheckpoint', (argument) => checkpoint.use(argument)),
    command('lightning.stopUsingCheckpoint', () => checkpoint.stop()),
  );
  context.subscriptions.push(
    command('lightning.exportCheckpoint', (argument) => exportCheckpointCommand(supervisor, log, argument)),
    command('lightning.deleteCheckpoint', (argument) => deleteCheckpointCommand(supervisor, checkpoint, log, argument)),
  );
  log.info(
    `[extension] Lightning ${String((context.extension.packageJSON as { version?: unknown }).version)} activated in ${(performance.now() - started).toFixed(1)} ms`,
  );
}

export function deactivate(): void {
  // Everything is disposed through context.subscriptions; the daemon this window started is stopped.
}
