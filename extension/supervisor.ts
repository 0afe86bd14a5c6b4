/**
 * Supervises the daemon with an explicit state (stopped / starting / running / failed): reuses the
 * daemon that already owns the workspace store (its discovery file), else spawns the bundled one
 * (`dist/cli.js serve`) on the runtime runtime.ts picks and reads its ready line. When the
 * connection drops it restarts with backoff (restartPolicy.ts) and, after repeated crashes, gives
 * up with a message and a "Show Logs" action. A start that fails is told at once (the daemon's
 * `startup-failed` line says why); one that lost the store to another window's daemon uses that one.
 *
 * The daemon this window started serves every window on the same store. Closing or reloading this window lets go
 * of it instead of stopping it: the daemon runs with `--stop-when-alone` and stdin as its lifeline, so it keeps the
 * other windows' connections and training runs and stops itself once no client is left (also when this window's
 * extension host crashes). Only **Restart Daemon** and a setting change stop it on purpose.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import * as vscode from 'vscode';
import type { ReadyMessage } from '../trainer-daemon/protocol';
import type { StartupFailed } from '../trainer-daemon/protocol/cliLines';
import { findDaemon, findUpgrading } from '../trainer-daemon/protocol/node/discovery';
import { connectDaemon, type DaemonClient } from './daemonClient';
import { RestartPolicy } from './restartPolicy';
import { awaitStartLine } from './startLines';
import { NODE_SQLITE_SINCE, resolveRuntimeFor } from './runtime';
import { readSettings, type UpstreamKey } from './settings';
import { assertNever } from '../trainer-daemon/protocol/assert';
import { errorMessage } from '../trainer-daemon/protocol/errors';

export type DaemonState =
  | { readonly kind: 'stopped' }
  | { readonly kind: 'starting' }
  | { readonly kind: 'running'; readonly url: string; readonly pid: number; readonly owned: boolean }
  | { readonly kind: 'failed'; readonly message: string };

/** Why a start failed: the daemon's `startup-failed` line (`protocol/cliLines.ts`), or the supervisor's own finding. */
class DaemonStartError extends Error {
  constructor(
    message: string,
    readonly reason: StartupFailed['reason'] | 'no_runtime' | 'no_ready_line',
  ) {
    super(message);
  }
}

const READY_TIMEOUT_MS = 30_000;
/**
 * How long the ready line may take once the daemon said it upgrades the store an earlier Lightning wrote: the upgrade
 * to schema 12 rewrites every span, ~9 s a million here.
 */
const UPGRADE_TIMEOUT_MS = 20 * 60_000;

export class DaemonSupervisor implements vscode.Disposable {
  private _state: DaemonState = { kind: 'stopped' };
  private readonly _onDidChangeState = new vscode.EventEmitter<DaemonState>();
  readonly onDidChangeState = this._onDidChangeState.event;
  private readonly _onDidConnect = new vscode.EventEmitter<DaemonClient>();
  /** Fires with each new connection (first start and every restart): re-subscribe to notifications. */
  readonly onDidConnect = this._onDidConnect.event;
  private readonly policy = new RestartPolicy();
  private client: DaemonClient | undefined;
  private child: ChildProcess | undefined;
  private starting: Promise<DaemonClient> | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  private disposed = false;
  /** The other version's daemon already warned about (once per daemon, not at each reconnection). */
  private warnedPid: number | undefined;

  constructor(
    private readonly cliPath: string,
    private readonly log: vscode.LogOutputChannel,
    private readonly upstreamKey: UpstreamKey,
    /** This extension's version: the daemon it bundles (`dist/cli.js`) is the same. */
    private readonly version: string,
  ) {}

  get state(): DaemonState {
    return this._state;
  }

  /** The connected client, starting (or reusing) the daemon first when needed. */
  ensureRunning(): Promise<DaemonClient> {
    if (this.client) return Promise.resolve(this.client);
    this.starting ??= this.start().finally(() => (this.starting = undefined));
    return this.starting;
  }

  /** **Lightning: Restart Daemon** and setting changes: stop ours, forget past crashes, start again. */
  async restart(): Promise<void> {
    this.policy.reset();
    this.stopOwned();
    await this.ensureRunning();
  }

  private setState(state: DaemonState): void {
    this._state = state;
    this._onDidChangeState.fire(state);
  }

  private async start(): Promise<DaemonClient> {
    clearTimeout(this.restartTimer);
    this.setState({ kind: 'starting' });
    try {
      const { client, state } = await this.connectOrSpawn();
      this.client = client;
      client.onDidClose(() => this.onConnectionLost(client));
      this.setState(state);
      this._onDidConnect.fire(client);
      return client;
    } catch (error) {
      const message = errorMessage(error);
      this.log.error(`[daemon] start failed: ${message}`);
      this.fail(message);
      throw error;
    }
  }

  private async connectOrSpawn(): Promise<{ client: DaemonClient; state: DaemonState }> {
    const settings = readSettings();
    // Another window's daemon upgrading the store (minutes for a large one) is waited for, not raced.
    const upgradeDeadline = Date.now() + UPGRADE_TIMEOUT_MS;
    let waitingFor: number | undefined;
    let waited: (() => void) | undefined;
    // A daemon racing us for the store (another window) wins the lock: use it once it announces itself.
    for (let attempt = 0; ; attempt += 1) {
      const upgrading = Date.now() < upgradeDeadline ? findUpgrading(settings.storeFile) : undefined;
      if (upgrading) {
        if (waitingFor !== upgrading.pid) {
          waitingFor = upgrading.pid;
          this.log.info(
            `[daemon] the daemon of another window (pid ${upgrading.pid}) is upgrading the store (${upgrading.spans} spans); waiting for it`,
          );
          waited ??= this.upgradeMessage(upgrading.spans);
        }
        await new Promise((resolve) => setTimeout(resolve, 500));
        continue;
      }
      waited?.();
      const running = findDaemon(settings.storeFile);
      if (running) {
        this.log.info(`[daemon] reusing the daemon (pid ${running.info.pid}) that owns ${running.info.store}`);
        let client: DaemonClient;
        try {
          client = await connectDaemon(running.info.url, running.token, this.log);
        } catch (error) {
          // A daemon stopping as we found it (alone after its window closed): look again, then start one.
          if (attempt >= 20) throw error;
          this.log.info(`[daemon] the daemon (pid ${running.info.pid}) did not take the connection; looking again`);
          await new Promise((resolve) => setTimeout(resolve, 250));
          continue;
        }
        if (running.info.version !== this.version) this.warnVersion(running.info.version, running.info.pid);
        return { client, state: { kind: 'running', url: running.info.url, pid: running.info.pid, owned: false } };
      }
      try {
        const ready = await this.spawnDaemon(settings.storeFile, settings.nodePath, settings.upstreamBaseUrl);
        const client = await connectDaemon(ready.url, ready.token, this.log);
        return { client, state: { kind: 'running', url: ready.url, pid: ready.pid, owned: true } };
      } catch (error) {
        if (!(error instanceof DaemonStartError) || error.reason !== 'store_owned' || attempt >= 20) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }

  /** The status bar says the store is being upgraded until the returned function is called. */
  private upgradeMessage(spans: number): () => void {
    let done: () => void = () => undefined;
    const over = new Promise<void>((resolve) => (done = resolve));
    vscode.window.setStatusBarMessage(`$(sync~spin) Lightning: upgrading the store (${spans} spans)…`, over);
    return done;
  }

  private async spawnDaemon(
    storeFile: string,
    nodePath: string | undefined,
    upstream: string | undefined,
  ): Promise<ReadyMessage> {
    const resolution = await resolveRuntimeFor(this.cliPath, nodePath);
    if (!resolution.ok) throw new DaemonStartError(resolution.message, 'no_runtime');
    const { runtime } = resolution;
    const apiKey = await this.upstreamKey.get();
    const args = [
      this.cliPath,
      'serve',
      '--store',
      storeFile,
      '--stop-when-alone',
      ...(upstream ? ['--upstream', upstream] : []),
    ];
    this.log.info(
      `[daemon] starting on ${runtime.description}: serve --store ${storeFile}${upstream ? ` --upstream ${upstream}` : ''}`,
    );
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...runtime.env,
      ...(apiKey ? { LIGHTNING_UPSTREAM_API_KEY: apiKey } : {}),
    };
    // stdin is the daemon's lifeline (`--stop-when-alone`): it closes when this window lets go or its host dies.
    const child = spawn(runtime.command, args, { stdio: ['pipe', 'pipe', 'pipe'], env });
    child.stdin.on('error', () => undefined);
    this.child = child;
    const stderrTail: string[] = [];
    readline.createInterface({ input: child.stderr }).on('line', (line) => {
      stderrTail.push(line);
      if (stderrTail.length > 20) stderrTail.shift();
      this.logDaemonLine(line);
    });
    return new Promise<ReadyMessage>((resolve, reject) => {
      let upgraded: (() => void) | undefined;
      const started = awaitStartLine(child.stdout, {
        readyMs: READY_TIMEOUT_MS,
        upgradeMs: UPGRADE_TIMEOUT_MS,
        onUpgrading: ({ from, to, spans }) => {
          this.log.info(
            `[daemon] upgrading the store an earlier Lightning wrote (schema ${from} → ${to}, ${spans} spans) before it is ready`,
          );
          upgraded = this.upgradeMessage(spans);
        },
      });
      void started.then((outcome) => {
        upgraded?.();
        switch (outcome.kind) {
          case 'ready':
            return resolve(outcome.ready);
          case 'failed':
            return reject(new DaemonStartError(outcome.failed.message, outcome.failed.reason));
          case 'unexpected':
            return reject(
              new DaemonStartError(
                `the daemon's first line was not its ready line: ${outcome.line.slice(0, 200)}`,
                'no_ready_line',
              ),
            );
          case 'timeout':
            child.kill('SIGKILL');
            return reject(
              new DaemonStartError(
                outcome.upgrading
                  ? `the daemon did not finish upgrading the store within ${outcome.seconds / 60} minutes`
                  : `the daemon gave no ready line within ${outcome.seconds} s`,
                'no_ready_line',
              ),
            );
          case 'closed':
            return; // The exit below says why.
          default:
            return assertNever(outcome);
        }
      });
      child.once('error', (error) => {
        reject(
          new DaemonStartError(
            `cannot run ${runtime.command}: ${error.message}. Clear "lightning.nodePath" to use the editor's own runtime, or point it at a Node ≥ ${NODE_SQLITE_SINCE}.`,
            'no_runtime',
          ),
        );
      });
      // After stdio closes, so a startup-failed line is read first (and wins: a settled promise ignores this).
      child.once('close', (code, signal) => {
        const detail = stderrTail.filter((line) => !line.startsWith('{')).join('\n') || stderrTail.join('\n');
        reject(
          new DaemonStartError(`the daemon exited (${code ?? signal}) before it was ready: ${detail}`, 'no_ready_line'),
        );
      });
    });
  }

  /** The daemon logs JSON lines on stderr: shown at their level under the `daemon` tag. */
  private logDaemonLine(line: string): void {
    let entry: { level?: unknown; msg?: unknown } | undefined;
    try {
      entry = JSON.parse(line) as { level?: unknown; msg?: unknown };
    } catch {
      entry = undefined;
    }
    if (!entry || typeof entry !== 'object') return this.log.warn(`[daemon] ${line}`);
    const text = `[daemon] ${line}`;
    if (entry.level === 'error') this.log.error(text);
    else if (entry.level === 'warn') this.log.warn(text);
    else if (entry.level === 'debug') this.log.debug(text);
    else this.log.info(text);
  }

  private onConnectionLost(client: DaemonClient): void {
    if (this.client !== client || this.disposed) return;
    this.client = undefined;
    this.child = undefined;
    const decision = this.policy.onCrash(Date.now());
    if (decision.action === 'giveUp') {
      this.fail(`the daemon stopped ${decision.crashes} times within a few minutes; not restarting it again`);
      return;
    }
    this.log.warn(`[daemon] connection lost; restarting in ${decision.delayMs} ms`);
    this.setState({ kind: 'starting' });
    this.restartTimer = setTimeout(() => void this.ensureRunning().catch(() => undefined), decision.delayMs);
  }

  /**
   * Another window's daemon, from another version of Lightning (one window updated, another not reloaded yet): used,
   * since the store is its alone, but said — its answers follow its version, not ours.
   */
  private warnVersion(theirs: string, pid: number): void {
    if (this.warnedPid === pid) return;
    this.warnedPid = pid;
    const message = `the daemon serving this store (pid ${pid}) is Lightning ${theirs}; this window runs ${this.version}. If another window started it, reload that window: once no window uses it, it stops and the next window starts ${this.version}. If you started it (lightning serve), stop it and restart it from this version.`;
    this.log.warn(`[daemon] ${message}`);
    void vscode.window.showWarningMessage(`Lightning: ${message}`, 'Show Logs').then((choice) => {
      if (choice === 'Show Logs') this.log.show();
    });
  }

  private fail(message: string): void {
    this.setState({ kind: 'failed', message });
    void vscode.window.showErrorMessage(`Lightning: ${message}`, 'Show Logs', 'Restart Daemon').then((choice) => {
      if (choice === 'Show Logs') this.log.show();
      if (choice === 'Restart Daemon') void this.restart().catch(() => undefined);
    });
  }

  /** Restart Daemon, a setting change: stops the daemon this window started, whoever else uses it. */
  private stopOwned(): void {
    const client = this.client;
    this.client = undefined;
    client?.dispose();
    this.child?.kill('SIGTERM');
    this.child = undefined;
  }

  /**
   * The window closes: lets go of the daemon it started instead of stopping it. Closing its stdin tells it to stop
   * once no other window or CLI command is connected; our ends of its output pipes close, and the editor's host need
   * not wait for it.
   */
  private letGo(): void {
    const client = this.client;
    this.client = undefined;
    client?.dispose();
    const child = this.child;
    this.child = undefined;
    if (!child) return;
    child.stdin?.end();
    child.stdout?.destroy();
    child.stderr?.destroy();
    child.unref();
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.restartTimer);
    this.letGo();
    this._onDidChangeState.dispose();
    this._onDidConnect.dispose();
  }
}
