/** `lightning serve`: the daemon in the foreground; ready line on stdout, JSON logs on stderr. */
import type { Command } from 'commander';
import { Daemon, DEFAULT_UPSTREAM, upstreamFromEnv } from '../../daemon';
import type { StartupFailed, StoreUpgrading } from '../../protocol/cliLines';
import { errorMessage, InvalidInputError, mapError } from '../../protocol/errors';
import { StoreOwnedError } from '../../storeOwnership';
import { NativeModuleError } from '../../store/nativeModules';
import { SqliteDriverError } from '../../store/driver';
import { redactUrl } from '../../protocol/secrets';
import { createLogger, type Logger } from '../../log';
import { storeOption, type GlobalOptions } from '../options';

/** The loopback names the daemon also accepts as Host (server/http.ts); any other --host is for agents only. */
const LOOPBACK = /^(127\.0\.0\.1|::1|localhost)$/;

export function parseUpstream(value: string, what = '--upstream'): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidInputError(`${what} ${redactUrl(value)}: not a URL (expected e.g. http://127.0.0.1:11434/v1)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new InvalidInputError(
      `${what} ${redactUrl(value)}: expected an http(s) URL such as http://127.0.0.1:11434/v1`,
    );
  return value.replace(/\/+$/, '');
}

type ServeOptions = GlobalOptions & { host: string; port: string; upstream?: string; stopWhenAlone?: boolean };

async function start(options: ServeOptions, logger: Logger): Promise<Daemon> {
  if (/^(0\.0\.0\.0|::|\[::\]|0+)$/.test(options.host)) {
    throw new InvalidInputError(
      `--host ${options.host}: name one address of this machine on the network the agents share (e.g. 10.0.0.5), not every interface`,
    );
  }
  const loopback = LOOPBACK.test(options.host);
  const port = Number(options.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw new InvalidInputError(`--port ${options.port}: expected a port number 0..65535`);
  const upstream = upstreamFromEnv(
    process.env,
    options.upstream === undefined ? undefined : parseUpstream(options.upstream),
  );
  const daemon = await Daemon.start({
    storeFile: options.store,
    host: loopback ? options.host : '127.0.0.1',
    port,
    logger,
    upstream,
    // Before the ready line, for the starter to wait for it longer (the extension's supervisor).
    onStoreUpgrade: (upgrade) =>
      process.stdout.write(`${JSON.stringify({ event: 'store-upgrading', ...upgrade } satisfies StoreUpgrading)}\n`),
    ...(loopback ? {} : { agentHost: options.host.replace(/^\[(.*)\]$/, '$1') }),
  });
  if (!loopback)
    logger.warn(
      "agents reach this daemon beyond loopback: only the agent routes listen there (capability URLs); open that port to the agents' machines only",
      { agents: options.host },
    );
  return daemon;
}

/** What a start failure means to the starter: another daemon owns the store, the runtime, a setting, or else. */
export function startupFailed(error: unknown): StartupFailed {
  const { kind } = mapError(error);
  const reason =
    error instanceof StoreOwnedError
      ? 'store_owned'
      : error instanceof NativeModuleError || error instanceof SqliteDriverError
        ? 'runtime'
        : error instanceof InvalidInputError
          ? 'configuration'
          : 'other';
  return { event: 'startup-failed', reason, kind, message: errorMessage(error) };
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description(
      'run the trainer daemon in the foreground (prints one JSON ready line on stdout; logs JSON lines on stderr)',
    )
    .addOption(storeOption())
    .option(
      '--host <address>',
      "where the daemon listens: loopback (default), or one address of this machine that other machines reach (e.g. 10.0.0.5, for agents on Ray nodes): the agents' routes are served there and their rollout URLs name it, while the RPC stays on 127.0.0.1. Never every interface (docs/scale-out.md)",
      '127.0.0.1',
    )
    .option('--port <number>', 'port to listen on (0: any free port)', '0')
    .option(
      '--upstream <url>',
      `OpenAI-compatible base URL for agents without their own OPENAI_BASE_URL (env LIGHTNING_UPSTREAM_URL; default ${DEFAULT_UPSTREAM}); the key comes from LIGHTNING_UPSTREAM_API_KEY`,
    )
    .option(
      '--stop-when-alone',
      'for a starter that keeps stdin open while it lives (the editor): once stdin closes, keep serving the editor windows and CLI commands still connected, and stop when the last of them has gone',
    )
    .action(async (options: ServeOptions) => {
      // Whoever reads our stdout and stderr may go before us (the editor window that started us): its pipes then
      // fail with EPIPE, which must not take the daemon down with it. Log lines are then lost, never the daemon.
      for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined);
      const logger = createLogger('daemon');
      const daemon = await start(options, logger).catch((error: unknown) => {
        // The first stdout line says why, for whoever started the daemon (the extension's supervisor).
        process.stdout.write(`${JSON.stringify(startupFailed(error))}\n`);
        throw error;
      });
      process.stdout.write(`${JSON.stringify(daemon.readyMessage())}\n`);
      await new Promise<void>((resolve) => {
        const stop = (why: Record<string, unknown>): void => {
          logger.info('stop requested', why);
          process.off('SIGTERM', onSignal);
          process.off('SIGINT', onSignal);
          void daemon.stop().then(resolve);
        };
        const onSignal = (signal: NodeJS.Signals): void => stop({ signal });
        process.on('SIGTERM', onSignal);
        process.on('SIGINT', onSignal);
        if (options.stopWhenAlone) stopWhenAlone(daemon, logger, () => stop({ reason: 'alone' }));
      });
    });
}

/** How long the daemon waits, alone after its starter went, for a client to come back (a window reloading). */
const ALONE_GRACE_MS = 1_000;

/**
 * `--stop-when-alone`: the starter's stdin is its lifeline. Once it closes (the editor window that started the
 * daemon closed, reloaded or crashed), the daemon keeps serving the clients still connected — other windows on the
 * same store, their training runs, CLI commands — and stops once none has been connected for ALONE_GRACE_MS.
 */
function stopWhenAlone(daemon: Daemon, logger: Logger, stop: () => void): void {
  let starterGone = false;
  let timer: NodeJS.Timeout | undefined;
  const check = (connections: number): void => {
    clearTimeout(timer);
    if (!starterGone || connections > 0) return;
    timer = setTimeout(() => {
      if (daemon.rpcConnections === 0) stop();
    }, ALONE_GRACE_MS);
  };
  daemon.onDidChangeRpcConnections(check);
  const onStarterGone = (): void => {
    if (starterGone) return;
    starterGone = true;
    if (daemon.rpcConnections > 0)
      logger.info("the daemon's starter has gone; serving the clients still connected until the last one goes", {
        clients: daemon.rpcConnections,
      });
    check(daemon.rpcConnections);
  };
  process.stdin.on('error', onStarterGone).once('end', onStarterGone).once('close', onStarterGone);
  process.stdin.resume();
}
