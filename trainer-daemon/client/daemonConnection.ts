/**
 * A daemon for commands that need one serving HTTP (agent runs): the one that owns the store, or
 * one started in this process, which stays up until its last client has gone.
 */
import { Daemon, upstreamFromEnv } from '../daemon';
import { findDaemon } from '../protocol/node/discovery';
import { ConflictError } from '../protocol/errors';
import { createLogger } from '../log';
import { RpcClient } from '../protocol/node/connection';
import { upgradeNotice } from '../store/migrations';

export interface DaemonConnection {
  readonly client: RpcClient;
  readonly close: () => Promise<void>;
}

/**
 * Connects to the store's daemon, or starts one in this process (stopped when the run ends). Runs
 * started at the same moment race to start it: the losers use the winner's.
 */
export async function connectOrStartDaemon(storeFile: string): Promise<DaemonConnection> {
  for (let attempt = 0; ; attempt += 1) {
    const running = findDaemon(storeFile);
    if (running) {
      const client = await RpcClient.connect(running.info.url, running.token);
      return { client, close: async () => client.dispose() };
    }
    try {
      return await startOwnDaemon(storeFile);
    } catch (error) {
      // Another run holds the lock and is starting: its discovery files appear within moments.
      if (!(error instanceof ConflictError) || attempt >= 50) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function startOwnDaemon(storeFile: string): Promise<DaemonConnection> {
  const daemon = await Daemon.start({
    storeFile,
    host: '127.0.0.1',
    port: 0,
    logger: createLogger('daemon', { level: 'warn' }),
    upstream: upstreamFromEnv(process.env),
    onStoreUpgrade: (upgrade) => process.stderr.write(upgradeNotice(upgrade)),
  });
  const client = await RpcClient.connect(daemon.url, daemon.token);
  return {
    client,
    close: async () => {
      client.dispose();
      await untilAlone(daemon);
      await daemon.stop();
    },
  };
}

/**
 * Other commands find this run's daemon through the discovery files (parallel `lightning run`s,
 * `lightning rollouts`): it stays up until the last of them has gone.
 */
async function untilAlone(daemon: Daemon): Promise<void> {
  const started = Date.now();
  let told = false;
  // Our own client's socket closes asynchronously, within milliseconds: wait for it as well — first in short steps
  // (a fixed 100 ms made every `lightning run` end 100 ms late), then, for other clients, in steps of 100 ms.
  for (let step = 5; daemon.rpcConnections > 0; step = Math.min(100, step * 2)) {
    if (!told && Date.now() - started > 2_000) {
      process.stderr.write(
        `lightning: this run's daemon serves ${daemon.rpcConnections} other client(s); waiting for them to finish\n`,
      );
      told = true;
    }
    await new Promise((resolve) => setTimeout(resolve, step));
  }
}
