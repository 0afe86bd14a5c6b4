/**
 * The trainer daemon: one per store. Starts the store, the batched span writer, the change
 * notifier, the RPC server and the HTTP server (in that order), announces itself (ready line,
 * discovery files), and shuts down in reverse order, the store last.
 */
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { errorMessage, InvalidInputError } from './protocol/errors';
import { discoveryPaths } from './protocol/node/discovery';
import type { DaemonInfo, ReadyMessage } from './protocol';
import { acquireStoreLock, markUpgrading, removeDiscovery, writeDiscovery, newToken } from './storeOwnership';
import type { DiscoveryPaths } from './protocol/node/discovery';
import type { Logger } from './log';
import type { Event } from './protocol/event';
import { createHandlers, invoke, type Handlers } from './rpc/handlers';
import { ChangeNotifier, type Broadcast } from './rpc/notifier';
import { ScoreJobs } from './rewards/job';
import { RpcServer } from './rpc/server';
import { DaemonHttpServer } from './server/http';
import { WriteQueue } from './store/writeQueue';
import { AgentRoutes } from './capture/agentRoutes';
import { limitsFromEnv } from './limits';
import { PolicyRouter } from './capture/policyRoutes';
import { OtlpReceiver } from './otlp/receiver';
import { WorkerBatches } from './runner/workerBatches';
import type { UpstreamConfig } from './capture/proxyCall';
import { registerSecretValue } from './protocol/secrets';
import { Store } from './store/store';
import type { StoreUpgrade } from './store/migrations';
import { TrainingManager } from './training/manager';
import { TrainingService } from './training/service';
import { PolicyServing } from './training/policyServing';
import { VERSION } from './version';

export interface DaemonOptions {
  readonly storeFile: string;
  readonly host: string;
  readonly port: number;
  /**
   * Also serve the agent-facing routes on this address (one that other machines reach, e.g. Ray
   * nodes): the rollout and batch URLs agents get name it; the RPC stays on `host` (loopback).
   */
  readonly agentHost?: string;
  readonly logger: Logger;
  /** Where LLM calls go when the agent had no OPENAI_BASE_URL of its own. */
  readonly upstream: UpstreamConfig;
  /** Told before a store an earlier Lightning wrote is upgraded, which may take a while (`serve` prints it). */
  readonly onStoreUpgrade?: (upgrade: StoreUpgrade) => void;
}

export const DEFAULT_UPSTREAM = 'https://api.openai.com/v1';

/** What `Daemon.start` builds, in start order; `stop()` takes them down in reverse, the store last. */
interface DaemonParts {
  readonly store: Store;
  readonly writes: WriteQueue;
  readonly notifier: ChangeNotifier;
  readonly rpc: RpcServer;
  readonly http: DaemonHttpServer;
  readonly otlp: OtlpReceiver;
  readonly training: TrainingManager;
  readonly policy: PolicyServing;
  readonly workerBatches: WorkerBatches;
  readonly scoreJobs: ScoreJobs;
  readonly token: string;
  readonly info: DaemonInfo;
  readonly url: string;
  readonly logger: Logger;
  readonly releaseLock: () => void;
}

/**
 * The upstream from the environment: LIGHTNING_UPSTREAM_URL / LIGHTNING_UPSTREAM_API_KEY; the
 * Anthropic and Gemini calls of agents without their own base URL go to LIGHTNING_ANTHROPIC_UPSTREAM_URL
 * / LIGHTNING_GEMINI_UPSTREAM_URL, else the providers' own APIs.
 */
export function upstreamFromEnv(env: NodeJS.ProcessEnv, baseUrl?: string): UpstreamConfig {
  const providers: Partial<Record<'anthropic' | 'gemini', string>> = {};
  if (env.LIGHTNING_ANTHROPIC_UPSTREAM_URL)
    providers.anthropic = env.LIGHTNING_ANTHROPIC_UPSTREAM_URL.replace(/\/+$/, '');
  if (env.LIGHTNING_GEMINI_UPSTREAM_URL) providers.gemini = env.LIGHTNING_GEMINI_UPSTREAM_URL.replace(/\/+$/, '');
  // Whatever shape the key has, an upstream echoing it (in an error) must not get it stored or logged.
  registerSecretValue(env.LIGHTNING_UPSTREAM_API_KEY);
  return {
    baseUrl: baseUrl ?? env.LIGHTNING_UPSTREAM_URL ?? DEFAULT_UPSTREAM,
    apiKey: env.LIGHTNING_UPSTREAM_API_KEY || undefined,
    timeoutMs: Number(env.LIGHTNING_UPSTREAM_TIMEOUT_MS ?? 600_000),
    providers,
  };
}

/**
 * How long one write of the daemon blocks its event loop waiting for another process's write lock;
 * the write queue retries a locked-out group commit with backoff, serving other requests meanwhile.
 */
const DAEMON_BUSY_TIMEOUT_MS = 50;

/** What an orphaned rollout's error says (docs/guarantees.md). */
export const ORPHANED_ERROR =
  'orphaned: the daemon stopped (crash or kill) while this rollout was running, and its runner did not come back to finish it; its calls up to then are kept';

/**
 * Listens on the port a previous daemon of this store used when it died (its discovery file is
 * still there), so agents that outlived it keep their URL; else on `port` as asked.
 */
async function listenOnPreviousPort(
  http: DaemonHttpServer,
  host: string,
  port: number,
  storeFile: string,
  logger: Logger,
): Promise<AddressInfo> {
  if (port === 0) {
    let previous: number | undefined;
    try {
      const info = JSON.parse(fs.readFileSync(discoveryPaths(storeFile).info, 'utf8')) as { url?: unknown };
      previous = typeof info.url === 'string' ? Number(new URL(info.url).port) || undefined : undefined;
    } catch {
      previous = undefined;
    }
    if (previous) {
      try {
        return await http.listen(host, previous);
      } catch (error) {
        logger.info('the previous daemon port is taken; listening on a new one', {
          port: previous,
          error: errorMessage(error),
        });
      }
    }
  }
  return http.listen(host, port);
}

/** The agent routes on `--host` too; an address this machine cannot listen on is the flag's fault, said so. */
async function listenForAgents(http: DaemonHttpServer, host: string): Promise<string> {
  try {
    return await http.listenForAgents(host);
  } catch (error) {
    throw new InvalidInputError(
      `--host ${host}: cannot listen there (${errorMessage(error)}); name an address of this machine on the agents' network, the one other machines reach it by (e.g. 10.0.0.5)`,
    );
  }
}

export class Daemon {
  private discovery: DiscoveryPaths | undefined;
  private stopping: Promise<void> | undefined;

  readonly store: Store;
  readonly token: string;
  readonly info: DaemonInfo;
  readonly url: string;

  private constructor(private readonly parts: DaemonParts) {
    this.store = parts.store;
    this.token = parts.token;
    this.info = parts.info;
    this.url = parts.url;
  }

  static async start(options: DaemonOptions): Promise<Daemon> {
    const storeFile = path.resolve(options.storeFile);
    const logger = options.logger;
    const limits = limitsFromEnv(process.env);
    const releaseLock = acquireStoreLock(storeFile);
    let store: Store;
    let upgraded: (() => void) | undefined;
    try {
      store = Store.open(storeFile, {
        busyTimeoutMs: DAEMON_BUSY_TIMEOUT_MS,
        onUpgrade: (upgrade) => {
          logger.info('upgrading the store an earlier Lightning wrote', { store: storeFile, ...upgrade });
          upgraded = markUpgrading(storeFile, upgrade);
          options.onStoreUpgrade?.(upgrade);
        },
      });
    } catch (error) {
      releaseLock();
      throw error;
    } finally {
      upgraded?.();
    }
    let http: DaemonHttpServer | undefined;
    // What a start that fails part-way stops again, newest first: a failed start exits, nothing left running (an OTLP
    // decode worker would keep the process alive).
    const started: Array<() => unknown> = [];
    try {
      const token = newToken();
      // The RPC token writes into any rollout: wherever it turns up (an agent that logs its env), it is redacted.
      registerSecretValue(token);
      const info: DaemonInfo = {
        version: VERSION,
        pid: process.pid,
        store: storeFile,
        schemaVersion: store.schemaVersion,
        startedAt: Date.now(),
      };
      const writes = new WriteQueue(store, logger.child('writes'));
      started.push(() => writes.shutdown());
      let baseUrl: string | undefined;
      // The loopback listener serves the agent routes too (also with --host, which adds another address).
      let loopbackUrl: string | undefined;
      const scoreJobs = new ScoreJobs();
      started.push(() => scoreJobs.dispose());
      // The RPC server that broadcasts is made from the handlers: they reach it through this binding.
      let broadcast: Broadcast | undefined;
      const workerBatches = new WorkerBatches({
        store,
        writes,
        logger: logger.child('runner'),
        baseUrl: () => baseUrl!,
      });
      started.push(() => workerBatches.dispose());
      // Training loops read and write through one service (the handlers serve tasks and checkpoints through it too);
      // their agents run through the same handler table, in-process, and follow worker batches on the queue itself.
      const trainingService = new TrainingService(store, writes);
      // Calls of a run with several policies go to each one's adapter: GRPO registers, the agent routes ask.
      const policyRouter = new PolicyRouter();
      const training = new TrainingManager({
        training: trainingService,
        call: { request: (name, params) => invoke(handlers, name, params) },
        batches: workerBatches,
        policies: policyRouter,
        maxAnswerBytes: limits.maxUpstreamBodyBytes,
        logger: logger.child('training'),
      });
      started.push(() => training.shutdown());
      const policy = new PolicyServing(store, logger.child('policy'));
      started.push(() => policy.shutdown());
      trainingService.protectServed(() => policy.current?.checkpointId);
      const handlers: Handlers = createHandlers({
        store,
        writes,
        info: () => info,
        agentBaseUrl: () => baseUrl,
        ownUrls: () => [baseUrl, loopbackUrl].filter((u): u is string => u !== undefined),
        scoreJobs,
        notify: (name, params) => broadcast?.(name, params),
        workerBatches,
        training,
        trainingService,
        policy,
        logger: logger.child('checkpoints'),
      });
      const rpc = new RpcServer({
        token,
        handlers,
        logger: logger.child('rpc'),
        maxBufferedBytes: limits.rpcMaxBufferedBytes,
      });
      broadcast = rpc.broadcast;
      started.push(() => rpc.dispose());
      policy.onDidChange((change) => rpc.broadcast('policyChanged', change));
      const notifier = new ChangeNotifier(store, rpc.broadcast);
      started.push(() => notifier.dispose());
      const otlp = new OtlpReceiver(writes, limits.maxOtlpBytes, logger.child('otlp'), limits.otlpWorkerHeapMb);
      started.push(() => otlp.close());
      const agents = new AgentRoutes({
        store,
        writes,
        otlp,
        upstream: options.upstream,
        logger: logger.child('agent'),
        workerBatches,
        token,
        policyRouter,
        limits,
      });
      http = new DaemonHttpServer({
        logger: logger.child('http'),
        headersTimeoutMs: limits.headersTimeoutMs,
        maxConnections: limits.maxConnections,
        routes: (request, response) => agents.handle(request, response),
        upgrades: { '/rpc': (request, socket, head) => rpc.handleUpgrade(request, socket, head) },
      });
      const address = await listenOnPreviousPort(http, options.host, options.port, storeFile, logger);
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      const url = `http://${host}:${address.port}`;
      loopbackUrl = url;
      baseUrl = options.agentHost ? await listenForAgents(http, options.agentHost) : url;
      const daemon = new Daemon({
        store,
        writes,
        notifier,
        rpc,
        http,
        otlp,
        training,
        policy,
        workerBatches,
        scoreJobs,
        token,
        info,
        url,
        logger,
        releaseLock,
      });
      daemon.discovery = writeDiscovery(
        storeFile,
        { url, pid: process.pid, store: storeFile, version: VERSION, startedAt: info.startedAt },
        token,
      );
      logger.info('daemon ready', {
        url,
        store: storeFile,
        schemaVersion: info.schemaVersion,
        sqlite: store.driver,
        node: process.version,
        ...(baseUrl !== url ? { agentUrl: baseUrl } : {}),
      });
      daemon.scheduleOrphanRecovery(limits.orphanGraceMs);
      return daemon;
    } catch (error) {
      http?.close();
      for (const stop of started.reverse()) {
        try {
          await stop();
        } catch (stopError) {
          logger.warn('could not stop a part of a daemon that failed to start', { error: errorMessage(stopError) });
        }
      }
      store.close();
      releaseLock();
      throw error;
    }
  }

  private orphanTimer: NodeJS.Timeout | undefined;

  /**
   * Rollouts left `running` by a daemon that died (kill -9, a crash, a power cut) would stay running
   * forever with a live key. Their runners get `graceMs` to come back (a `lightning run` whose agent
   * is still working reconnects and finishes its rollout; an agent still calling keeps its rollout
   * fresh); after that, each running rollout with no activity since this daemon started fails with a
   * message that says what happened. Its calls up to then are kept.
   */
  private scheduleOrphanRecovery(graceMs: number): void {
    const since = this.info.startedAt;
    this.orphanTimer = setTimeout(() => {
      void this.recoverOrphans(since).catch((error: unknown) =>
        this.parts.logger.error('could not recover orphaned rollouts', { error: errorMessage(error) }),
      );
    }, graceMs);
    this.orphanTimer.unref();
  }

  private async recoverOrphans(since: number): Promise<void> {
    const orphans: string[] = [];
    let cursor: string | undefined;
    do {
      const page = this.store.listRollouts({
        status: ['running'],
        order: 'oldest',
        limit: 500,
        ...(cursor ? { cursor } : {}),
      });
      orphans.push(...page.items.filter((rollout) => rollout.updatedAt < since).map((rollout) => rollout.id));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    for (const id of orphans) {
      await this.parts.writes
        .submit(() => {
          // Re-read inside the write: a runner may have finished it meanwhile.
          const now = this.store.getRollout(id);
          if (now.status !== 'running' || now.updatedAt >= since) return;
          this.store.transitionRollout({ id, to: 'failed', error: ORPHANED_ERROR, exitCode: null });
        })
        .catch((error: unknown) =>
          this.parts.logger.warn('could not fail an orphaned rollout', { rolloutId: id, error: errorMessage(error) }),
        );
    }
    if (orphans.length > 0)
      this.parts.logger.warn('failed rollouts orphaned by an earlier daemon', { count: orphans.length });
  }

  /** Editor/CLI clients connected over the RPC right now. */
  get rpcConnections(): number {
    return this.parts.rpc.connectionCount;
  }

  /** Fires with the new count each time an editor or CLI client connects over the RPC or goes. */
  get onDidChangeRpcConnections(): Event<number> {
    return this.parts.rpc.onDidChangeConnections;
  }

  readyMessage(): ReadyMessage {
    return { event: 'ready', url: this.url, token: this.token, store: this.info.store, pid: process.pid };
  }

  /** Stops accepting, flushes queued writes and notifications, closes the store. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.parts.logger.info('daemon stopping');
      clearTimeout(this.orphanTimer);
      if (this.discovery) removeDiscovery(this.discovery);
      // Training loops first: they stop their agents and workers and record the cancel…
      await this.parts.training.shutdown();
      await this.parts.policy.shutdown();
      // Workers waiting for a rollout get 204 instead of holding the drain up; score jobs stop after their chunk.
      this.parts.workerBatches.dispose();
      this.parts.scoreJobs.dispose();
      // …then stop taking requests and let those in flight finish (their writes are still taken)…
      await this.parts.http.drain(5_000);
      // …then commit what is queued, announce it, and give committed RPC replies a turn to go out.
      this.parts.writes.shutdown();
      this.parts.notifier.dispose();
      await new Promise((resolve) => setImmediate(resolve));
      this.parts.rpc.dispose();
      this.parts.http.close();
      await this.parts.otlp.close();
      this.store.close();
      this.parts.releaseLock();
      this.parts.logger.info('daemon stopped');
    })();
    return this.stopping;
  }
}
