/**
 * **Lightning: Debug with Lightning**: runs a launch configuration under the normal debugger with
 * the instrumentation environment, recorded as one rollout per debug session. A
 * DebugConfigurationProvider for every debug type asks the daemon for a rollout (agentRuns/start)
 * when a configuration has `"lightning": true` and adds the environment after variable
 * substitution; a debug adapter tracker catches the debuggee's exit code, the end of its output
 * and the exception it stopped on (./sessionRecords.ts), and the rollout is finalized when the session
 * ends (a failure with its reason: protocol/failure.ts).
 *
 * A restart that relaunches the program with the first run's environment (VS Code terminates the adapter and starts a
 * new one with the same resolved configuration) is recorded as a rollout of its own: before the new adapter starts,
 * the daemon gives the session's capability key to a new rollout (`agentRuns/start` with `key`), so the relaunched
 * program's calls neither hit an ended rollout nor join the first run's trajectory.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as vscode from 'vscode';
import type { DaemonSupervisor } from '../supervisor';
import { readSettings, type UpstreamKey } from '../settings';
import {
  baseEnvironment,
  instrumentConfig,
  rolloutKey,
  runnableConfigurations,
  upstreamFor,
  wantsLightning,
  type LaunchConfig,
} from './launchConfig';
import { debugRoute } from './route';
import type { DebugPreloads } from './preloadFiles';
import { CheckpointUnavailableError, type CheckpointSource } from '../checkpoints/useCheckpoint';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import { SessionRecords, type AdapterMessage } from './sessionRecords';
import type { AgentRun, ServedPolicy } from '../../trainer-daemon/protocol';

export class DebugWithLightning implements vscode.Disposable, vscode.DebugConfigurationProvider {
  private readonly disposables: vscode.Disposable[] = [];
  /** What each session's adapter reported: exit codes, output, exceptions (a child session's for its parent). */
  private readonly sessions = new SessionRecords();
  /** The rollout a restarted session records now, by session id (its configuration still names the first run's). */
  private readonly current = new Map<string, string>();
  /**
   * Each session's last finalization, by session id, with the rollout its configuration named: a restart waits for it
   * before the key is given again, and gives it only to a session still configured with that rollout's environment.
   */
  private readonly ended = new Map<string, { readonly configured: string; readonly done: Promise<boolean> }>();
  /**
   * The rollout each recorded session started with, by session id: what it records even after VS Code re-resolved its
   * configuration for a restart from a launch configuration without Lightning.
   */
  private readonly recorded = new Map<string, string>();
  /** A restart the adapter does itself (js-debug), in flight: the session's end waits for it. */
  private readonly restarts = new Map<string, Promise<void>>();
  /**
   * The launch configuration as the user wrote it, by the rollout its session started as: a restart's rollout is routed
   * from it (the session's own configuration carries the instrumentation: its OPENAI_BASE_URL is the rollout's URL).
   */
  private readonly launches = new Map<string, LaunchConfig>();
  /** Sessions whose adapter was told to end for a restart (`terminate`/`disconnect` with `restart: true`). */
  private readonly endingForRestart = new Set<string>();
  private readonly _onDidFinishRollout = new vscode.EventEmitter<string>();
  /** A debug rollout was finalized (its id): the last finished rollout for Annotate Reward. */
  readonly onDidFinishRollout = this._onDidFinishRollout.event;

  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly log: vscode.LogOutputChannel,
    /**
     * dist/exit-code.js, preloaded into Node debuggees, and the capture preloads, into every process of the session
     * (those that exist).
     */
    private readonly preloads: DebugPreloads,
    private readonly upstreamKey: UpstreamKey,
    /** Use Checkpoint: a checkpoint in use answers the session's LLM calls. */
    private readonly checkpoint: CheckpointSource,
  ) {
    this.disposables.push(
      vscode.debug.registerDebugConfigurationProvider('*', this),
      vscode.debug.registerDebugAdapterTrackerFactory('*', {
        createDebugAdapterTracker: (session) => this.trackerFor(session),
      }),
      vscode.debug.onDidStartDebugSession((session) => {
        this.sessions.started(session.id, session.parentSession?.id);
        const own = ownRollout(session);
        if (own !== undefined) this.recorded.set(session.id, own);
      }),
      vscode.debug.onDidTerminateDebugSession((session) => void this.finish(session)),
      this._onDidFinishRollout,
    );
  }

  /** The command: choose a launch configuration (quick pick when there are several) and start it. */
  async run(folder?: vscode.WorkspaceFolder): Promise<void> {
    const workspaceFolder = folder ?? vscode.workspace.workspaceFolders?.[0];
    const configurations = runnableConfigurations(
      vscode.workspace.getConfiguration('launch', workspaceFolder?.uri).get<LaunchConfig[]>('configurations') ?? [],
    );
    if (configurations.length === 0) {
      const choice = await vscode.window.showWarningMessage(
        'Lightning: no launch configuration to run. Add one to .vscode/launch.json (Run and Debug → create a launch.json file).',
        'Open Run and Debug',
      );
      if (choice) await vscode.commands.executeCommand('workbench.view.debug');
      return;
    }
    const config =
      configurations.length === 1
        ? configurations[0]
        : (
            await vscode.window.showQuickPick(
              configurations.map((c) => ({ label: c.name, description: c.type, config: c })),
              // Opened from the palette while a webview (the panel, a run tab) had focus, the webview can take focus
              // back just after: the pick must not close under that.
              { title: 'Debug with Lightning', placeHolder: 'Which launch configuration?', ignoreFocusOut: true },
            )
          )?.config;
    if (!config) return;
    await vscode.debug.startDebugging(workspaceFolder, { ...config, lightning: true });
  }

  async resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    const launch = config as LaunchConfig;
    if (!wantsLightning(launch)) return config;
    try {
      const { run, served } = await this.startRun(launch, folder);
      this.launches.set(run.rollout.id, launch);
      if (this.launches.size > 100) this.launches.delete(this.launches.keys().next().value!);
      if (!served) void this.warnWithoutUpstream(launch);
      return instrumentConfig(
        launch,
        run,
        process.env,
        this.preloads.exitCode ? { recorder: this.preloads.exitCode, file: exitCodeFile(run.rollout.id) } : undefined,
        this.preloads.capture,
      );
    } catch (error) {
      // Already explained, with Set Up Trainer / Stop Using Checkpoint: the launch does not start.
      if (error instanceof CheckpointUnavailableError) return undefined;
      const message = errorMessage(error);
      this.log.error(`[debug] cannot start a rollout for "${launch.name}": ${message}`);
      const choice = await vscode.window.showErrorMessage(
        `Lightning: cannot record "${launch.name}": ${message}`,
        'Debug without Lightning',
        'Show Logs',
      );
      if (choice === 'Show Logs') this.log.show();
      return choice === 'Debug without Lightning' ? { ...config, lightning: false } : undefined;
    }
  }

  /** A new debug rollout for the launch; `key`: the capability key of the session's ended run (a restart). */
  private async startRun(
    launch: LaunchConfig,
    folder: vscode.WorkspaceFolder | undefined,
    key?: string,
  ): Promise<{ run: AgentRun; served: ServedPolicy | null }> {
    const client = await this.supervisor.ensureRunning();
    const served = await this.checkpoint.servedForRollout(client);
    const run = await client.request('startAgentRun', {
      mode: 'debug',
      label: launch.name,
      source: { kind: 'launch', name: launch.name, ...(folder ? { workspaceFolder: folder.uri.fsPath } : {}) },
      ...debugRoute(launch, process.env, served),
      ...(key === undefined ? {} : { key }),
    });
    this.log.info(
      `[debug] "${launch.name}" (${launch.type}) ${key === undefined ? 'records' : 'restarted: records'} rollout ${run.rollout.id}${served ? ` answered by checkpoint ${served.checkpointId}` : ''}`,
    );
    return { run, served };
  }

  /**
   * An agent with no OPENAI_BASE_URL of its own, no upstream setting and no key anywhere would send
   * its calls to the default upstream without credentials: say so before the first call fails.
   */
  private async warnWithoutUpstream(launch: LaunchConfig): Promise<void> {
    if (
      upstreamFor(launch, process.env) !== null ||
      readSettings().upstreamBaseUrl ||
      baseEnvironment(launch, process.env).OPENAI_API_KEY ||
      (await this.upstreamKey.get())
    )
      return;
    const choice = await vscode.window.showWarningMessage(
      'Lightning: no upstream LLM is configured, so this agent’s calls go to https://api.openai.com/v1 without an API key. Set "lightning.upstreamBaseUrl" (e.g. a local Ollama or vLLM) or an API key.',
      'Set Upstream API Key',
      'Open Settings',
    );
    if (choice === 'Set Upstream API Key') await this.upstreamKey.prompt();
    if (choice === 'Open Settings')
      await vscode.commands.executeCommand('workbench.action.openSettings', 'lightning.upstreamBaseUrl');
  }

  /**
   * Awaited by VS Code before the session's adapter starts: after a restart that ended the adapter (the session's
   * rollout was finalized), the new rollout is ready before the program starts.
   */
  private async trackerFor(session: vscode.DebugSession): Promise<vscode.DebugAdapterTracker> {
    const ended = this.ended.get(session.id);
    this.ended.delete(session.id);
    if (ended && (await ended.done)) {
      const configured = ownRollout(session);
      // Relaunched with the ended run's environment: its key opens a new rollout. Re-resolved by VS Code (launch.json
      // changed): a new rollout already, or none when the configuration does not ask for Lightning — say so.
      if (configured === ended.configured) await this.restarted(session);
      else if (configured === undefined) void this.restartedWithout(session);
    }
    return {
      onDidSendMessage: (message: AdapterMessage) => this.sessions.observe(session.id, message),
      // An adapter that restarts the program itself (js-debug): the run that ends is finalized, the next recorded anew.
      onWillReceiveMessage: (message: AdapterMessage) => {
        if (message.type !== 'request') return;
        if (message.command === 'restart') {
          const restart = this.restarting(session).finally(() => this.restarts.delete(session.id));
          this.restarts.set(session.id, restart);
        } else if (
          (message.command === 'terminate' || message.command === 'disconnect') &&
          message.arguments?.restart === true
        )
          this.endingForRestart.add(session.id);
      },
    };
  }

  /** The adapter is asked to restart the program (DAP `restart`): the run's rollout ends, its key opens a new one. */
  private async restarting(session: vscode.DebugSession): Promise<void> {
    const configured = ownRollout(session) ?? this.recorded.get(session.id);
    if (configured === undefined) return;
    if (!(await this.finalize(session, configured, true))) return;
    if (ownRollout(session) === configured) await this.restarted(session);
    else void this.restartedWithout(session);
  }

  /** The session relaunches its program with the ended run's environment: its key opens a new rollout. */
  private async restarted(session: vscode.DebugSession): Promise<void> {
    const configured = ownRollout(session);
    const key = rolloutKey(session.configuration.env);
    if (configured === undefined || key === undefined) return;
    const launch = this.launches.get(configured);
    try {
      if (!launch) throw new Error('its first run was started before this window last (re)loaded');
      const { run } = await this.startRun(launch, session.workspaceFolder, key);
      this.current.set(session.id, run.rollout.id);
    } catch (error) {
      this.log.error(`[debug] "${session.name}" restarted, but its run cannot be recorded: ${errorMessage(error)}`);
      void vscode.window.showWarningMessage(
        `Lightning: the restarted "${session.name}" is not recorded (${errorMessage(error)}). Stop it and start Debug with Lightning again.`,
      );
    }
  }

  /** A recorded session that VS Code relaunched from a launch configuration without `"lightning": true`. */
  private async restartedWithout(session: vscode.DebugSession): Promise<void> {
    this.log.warn(`[debug] "${session.name}" was restarted without Lightning: its relaunch is not recorded`);
    await vscode.window.showWarningMessage(
      `Lightning: the restarted "${session.name}" runs without Lightning: VS Code relaunched it from launch.json, where it has no "lightning": true. Stop it and run Debug with Lightning again, or add "lightning": true to the configuration.`,
    );
  }

  /**
   * The debuggee's exit code: from the debug adapter's `exited` event (debugpy and most adapters),
   * of the session or a child session, else the file a Node debuggee wrote (js-debug sends none).
   */
  private exitCodeOf(session: vscode.DebugSession, rolloutId: string): number | undefined {
    const reported = this.sessions.reportedExitCode(session.id);
    const file = exitCodeFile(rolloutId);
    let recorded: number | undefined;
    try {
      recorded = Number.parseInt(fs.readFileSync(file, 'utf8'), 10);
      fs.rmSync(file, { force: true });
    } catch {
      recorded = undefined;
    }
    return reported ?? (Number.isInteger(recorded) ? recorded : undefined);
  }

  private async finish(session: vscode.DebugSession): Promise<void> {
    const configured = ownRollout(session) ?? this.recorded.get(session.id);
    this.recorded.delete(session.id);
    if (configured === undefined) return;
    // A restart still giving the key to a new rollout: that rollout is the one this end finalizes.
    await this.restarts.get(session.id);
    const finalized = this.finalize(session, configured, this.endingForRestart.delete(session.id));
    this.ended.set(session.id, { configured, done: finalized });
    // Ended sessions are remembered for a restart; the oldest go once there are many.
    if (this.ended.size > 100) this.ended.delete(this.ended.keys().next().value!);
    await finalized;
  }

  /**
   * Ends the rollout the session's program ran as (the configured one, or a restart's); true once it is ended. A run
   * ended for a restart is cancelled whatever its exit code (the debugger stopped it).
   */
  private async finalize(session: vscode.DebugSession, configured: string, restart: boolean): Promise<boolean> {
    const rolloutId = this.current.get(session.id) ?? configured;
    this.current.delete(session.id);
    // The program writes the file its environment names: the first run's, also after a restart.
    const exitCode = this.exitCodeOf(session, configured);
    const env =
      session.configuration.env !== null && typeof session.configuration.env === 'object'
        ? (session.configuration.env as Record<string, string | undefined>)
        : {};
    const final = restart
      ? { to: 'cancelled' as const, error: RESTARTED }
      : this.sessions.final(session.id, exitCode, { ...process.env, ...env });
    try {
      const client = await this.supervisor.ensureRunning();
      const rollout = await client.request('transitionRollout', {
        id: rolloutId,
        ...final,
        exitCode: exitCode ?? null,
      });
      this.log.info(
        `[debug] rollout ${rolloutId} ${rollout.status}${exitCode === undefined ? '' : ` (exit code ${exitCode})`}`,
      );
      this._onDidFinishRollout.fire(rolloutId);
      return true;
    } catch (error) {
      this.log.error(`[debug] cannot finalize rollout ${rolloutId}: ${errorMessage(error)}`);
      return false;
    } finally {
      this.sessions.forget(session.id);
    }
  }

  dispose(): void {
    for (const disposable of this.disposables) disposable.dispose();
  }
}

/** Why a run ended by a restart is cancelled. */
const RESTARTED = 'restarted from the debugger before the program ended';

/** The rollout a session records, unless it is a child session recording its parent's (js-debug's processes). */
function ownRollout(session: vscode.DebugSession): string | undefined {
  const configured = (session.configuration as LaunchConfig).lightningRolloutId;
  if (typeof configured !== 'string' || session.parentSession?.configuration.lightningRolloutId === configured)
    return undefined;
  return configured;
}

function exitCodeFile(rolloutId: string): string {
  return path.join(os.tmpdir(), `lightning-exit-${rolloutId}`);
}
