/**
 * **Lightning: Debug with Lightning**: runs a launch configuration under the normal debugger with
 * the instrumentation environment, recorded as one rollout per debug session. A
 * DebugConfigurationProvider for every debug type asks the daemon for a rollout (agentRuns/start)
 * when a configuration has `"lightning": true` and adds the environment after variable
 * substitution; a debug adapter tracker catches the debuggee's exit code, the end of its output
 * and the exception it stopped on, and the rollout is finalized when the session ends (a failure
 * with its reason: protocol/failure.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as vscode from 'vscode';
import type { DaemonSupervisor } from '../supervisor';
import { readSettings, type UpstreamKey } from '../settings';
import {
  baseEnvironment,
  finalStatus,
  instrumentConfig,
  runnableConfigurations,
  upstreamFor,
  wantsLightning,
  type LaunchConfig,
} from './launchConfig';
import { debugRoute } from '../checkpoints/routing';
import type { DebugPreloads } from './preloadFiles';
import { CheckpointUnavailableError, type CheckpointSource } from '../checkpoints/useCheckpoint';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import {
  envSecrets,
  exceptionFromInfo,
  exceptionOf,
  failureText,
  OutputTail,
} from '../../trainer-daemon/protocol/failure';
import { isSecretVariable } from '../../trainer-daemon/protocol/secrets';

export class DebugWithLightning implements vscode.Disposable, vscode.DebugConfigurationProvider {
  private readonly disposables: vscode.Disposable[] = [];
  /** Exit codes reported by debug adapters (`exited` events), by session id. */
  private readonly exitCodes = new Map<string, number>();
  /** The end of each session's output (`output` events: the program's stderr and stdout, the adapter's console). */
  private readonly outputs = new Map<string, OutputTail>();
  /** The exception a session stopped on (`exceptionInfo`), by session id. */
  private readonly exceptions = new Map<string, string>();
  /** Parent session ids, by child session id. */
  private readonly parents = new Map<string, string>();
  private readonly _onDidFinishRollout = new vscode.EventEmitter<string>();
  /** A debug rollout was finalized (its id): the last finished rollout for Annotate Reward. */
  readonly onDidFinishRollout = this._onDidFinishRollout.event;

  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly log: vscode.LogOutputChannel,
    /** dist/exit-code.js, preloaded into Node debuggees, and the capture preloads, into every process of the session (those that exist). */
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
      vscode.debug.onDidStartDebugSession(
        (session) => session.parentSession && this.parents.set(session.id, session.parentSession.id),
      ),
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
              { title: 'Debug with Lightning', placeHolder: 'Which launch configuration?' },
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
      const client = await this.supervisor.ensureRunning();
      const served = await this.checkpoint.servedForRollout(client);
      const run = await client.request('startAgentRun', {
        mode: 'debug',
        label: launch.name,
        source: { kind: 'launch', name: launch.name, ...(folder ? { workspaceFolder: folder.uri.fsPath } : {}) },
        ...debugRoute(launch, process.env, served),
      });
      this.log.info(
        `[debug] "${launch.name}" (${launch.type}) records rollout ${run.rollout.id}${served ? ` answered by checkpoint ${served.checkpointId}` : ''}`,
      );
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

  private trackerFor(session: vscode.DebugSession): vscode.DebugAdapterTracker {
    return {
      onDidSendMessage: (message: AdapterMessage) => {
        if (message.type === 'event' && message.event === 'exited' && typeof message.body?.exitCode === 'number')
          this.exitCodes.set(session.id, message.body.exitCode);
        if (
          message.type === 'event' &&
          message.event === 'output' &&
          typeof message.body?.output === 'string' &&
          message.body.category !== 'telemetry'
        ) {
          let tail = this.outputs.get(session.id);
          if (!tail) this.outputs.set(session.id, (tail = new OutputTail()));
          tail.push(message.body.output);
        }
        if (message.type === 'response' && message.command === 'exceptionInfo' && message.success && message.body) {
          const exception = exceptionFromInfo(message.body);
          if (exception) this.exceptions.set(session.id, exception);
        }
      },
    };
  }

  /**
   * The debuggee's exit code: from the debug adapter's `exited` event (debugpy and most adapters),
   * of the session or a child session, else the file a Node debuggee wrote (js-debug sends none).
   */
  private exitCodeOf(session: vscode.DebugSession, rolloutId: string): number | undefined {
    const reported =
      this.exitCodes.get(session.id) ??
      [...this.exitCodes.entries()].find(([id]) => this.parents.get(id) === session.id)?.[1];
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
    const rolloutId = (session.configuration as LaunchConfig).lightningRolloutId;
    if (typeof rolloutId !== 'string' || session.parentSession?.configuration.lightningRolloutId === rolloutId) return;
    const exitCode = this.exitCodeOf(session, rolloutId);
    const final = this.withReason(session, finalStatus(exitCode));
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
    } catch (error) {
      this.log.error(`[debug] cannot finalize rollout ${rolloutId}: ${errorMessage(error)}`);
    } finally {
      for (const [id, parent] of this.parents) {
        if (parent !== session.id) continue;
        this.forget(id);
        this.parents.delete(id);
      }
      this.forget(session.id);
    }
  }

  /** A failure gets the session's (and its child sessions') output and exception; a stop, the exception it stopped at. */
  private withReason(
    session: vscode.DebugSession,
    final: ReturnType<typeof finalStatus>,
  ): ReturnType<typeof finalStatus> {
    const ids = [session.id, ...[...this.parents].filter(([, parent]) => parent === session.id).map(([id]) => id)];
    const output = ids
      .map((id) => this.outputs.get(id)?.text ?? '')
      .filter(Boolean)
      .join('\n');
    const stoppedAt = ids.map((id) => this.exceptions.get(id)).find(Boolean);
    const env =
      session.configuration.env !== null && typeof session.configuration.env === 'object'
        ? (session.configuration.env as Record<string, string | undefined>)
        : {};
    if (final.to === 'failed')
      return {
        ...final,
        error: failureText(
          final.error ?? 'failed',
          output,
          envSecrets({ ...process.env, ...env }, isSecretVariable),
          exceptionOf(output) ?? stoppedAt,
        ),
      };
    if (final.to === 'cancelled' && stoppedAt)
      return { ...final, error: `${final.error ?? 'cancelled'}; it had stopped at ${stoppedAt}` };
    return final;
  }

  private forget(sessionId: string): void {
    this.exitCodes.delete(sessionId);
    this.outputs.delete(sessionId);
    this.exceptions.delete(sessionId);
  }

  dispose(): void {
    for (const disposable of this.disposables) disposable.dispose();
  }
}

/** What a tracker reads of the Debug Adapter Protocol's messages. */
interface AdapterMessage {
  type?: string;
  event?: string;
  command?: string;
  success?: boolean;
  body?: { exitCode?: unknown; output?: unknown; category?: unknown; exceptionId?: unknown; description?: unknown };
}

function exitCodeFile(rolloutId: string): string {
  return path.join(os.tmpdir(), `lightning-exit-${rolloutId}`);
}
