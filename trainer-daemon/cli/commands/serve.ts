/** `lightning serve`: the daemon in the foreground; ready line on stdout, JSON logs on stderr. */
import type { Command } from 'commander';
import { Daemon, DEFAULT_UPSTREAM, upstreamFromEnv } from '../../daemon';
import { InvalidInputError } from '../../errors';
import { redactUrl } from '../../secrets';
import { createLogger } from '../../log';
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
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidInputError(`${what} ${redactUrl(value)}: expected an http(s) URL such as http://127.0.0.1:11434/v1`);
  return value.replace(/\/+$/, '');
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run the trainer daemon in the foreground (prints one JSON ready line on stdout; logs JSON lines on stderr)')
    .addOption(storeOption())
    .option('--host <address>', "where the daemon listens: loopback (default), or one address of this machine that other machines reach (e.g. 10.0.0.5, for agents on Ray nodes): the agents' routes are served there and their rollout URLs name it, while the RPC stays on 127.0.0.1. Never every interface (README, \"Scale out\")", '127.0.0.1')
    .option('--port <number>', 'port to listen on (0: any free port)', '0')
    .option('--upstream <url>', `OpenAI-compatible base URL for agents without their own OPENAI_BASE_URL (env LIGHTNING_UPSTREAM_URL; default ${DEFAULT_UPSTREAM}); the key comes from LIGHTNING_UPSTREAM_API_KEY`)
    .action(async (options: GlobalOptions & { host: string; port: string; upstream?: string }) => {
      if (/^(0\.0\.0\.0|::|\[::\]|0+)$/.test(options.host)) {
        throw new InvalidInputError(`--host ${options.host}: name one address of this machine on the network the agents share (e.g. 10.0.0.5), not every interface`);
      }
      const loopback = LOOPBACK.test(options.host);
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new InvalidInputError(`--port ${options.port}: expected a port number 0..65535`);
      const logger = createLogger('daemon');
      const upstream = upstreamFromEnv(process.env, options.upstream === undefined ? undefined : parseUpstream(options.upstream));
      const daemon = await Daemon.start({ storeFile: options.store, host: loopback ? options.host : '127.0.0.1', port, logger, upstream, ...(loopback ? {} : { agentHost: options.host.replace(/^\[(.*)\]$/, '$1') }) });
      if (!loopback) logger.warn('agents reach this daemon beyond loopback: only the agent routes listen there (capability URLs); open that port to the agents\' machines only', { agents: options.host });
      process.stdout.write(`${JSON.stringify(daemon.readyMessage())}\n`);
      await new Promise<void>((resolve) => {
        const stop = (signal: NodeJS.Signals): void => {
          logger.info('signal received', { signal });
          process.off('SIGTERM', stop);
          process.off('SIGINT', stop);
          void daemon.stop().then(resolve);
        };
        process.on('SIGTERM', stop);
        process.on('SIGINT', stop);
      });
    });
}
