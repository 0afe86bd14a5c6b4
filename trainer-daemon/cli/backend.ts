/**
 * Where a CLI command gets its data: the daemon that owns the store (over the RPC), or, when no
 * daemon runs, the store itself through the very same handlers. Either way results are checked
 * against the protocol's schemas before they are printed.
 */
import fs from 'node:fs';
import { Methods, type MethodName, type ParamsOf, type ResultOf } from '../protocol';
import { findDaemon } from '../protocol/node/discovery';
import { NotFoundError } from '../protocol/errors';
import { createHandlers, invoke } from '../rpc/handlers';
import { RpcClient } from '../protocol/node/connection';
import { Store } from '../store/store';
import { upgradeNotice, type StoreUpgrade } from '../store/migrations';
import { refuseUpgradeUnderDaemon } from '../storeOwnership';
import { VERSION } from '../version';

export interface Backend {
  /** `daemon`: over the running daemon's RPC; `store`: the store file opened directly. */
  readonly via: 'daemon' | 'store';
  call<M extends MethodName>(name: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
  close(): void;
}

/**
 * For a command that opens the store itself: refuses to upgrade it under a daemon (storeOwnership.ts), else says on
 * stderr that it upgrades it, which can take a while.
 */
export function announceUpgrade(storeFile: string, upgrade: StoreUpgrade): void {
  refuseUpgradeUnderDaemon(storeFile, upgrade);
  process.stderr.write(upgradeNotice(upgrade));
}

export async function openBackend(storeFile: string, options: { create?: boolean } = {}): Promise<Backend> {
  const daemon = findDaemon(storeFile);
  if (daemon) {
    const client = await RpcClient.connect(daemon.info.url, daemon.token);
    return { via: 'daemon', call: (name, params) => client.request(name, params), close: () => client.dispose() };
  }
  if (!options.create && !fs.existsSync(storeFile)) {
    throw new NotFoundError(`no store at ${storeFile}: start one with \`lightning serve\` or pass --store FILE`);
  }
  const store = Store.open(storeFile, { onUpgrade: (upgrade) => announceUpgrade(storeFile, upgrade) });
  const handlers = createHandlers({
    store,
    info: () => ({
      version: VERSION,
      pid: process.pid,
      store: storeFile,
      schemaVersion: store.schemaVersion,
      startedAt: Date.now(),
    }),
  });
  return {
    via: 'store',
    call: async (name, params) =>
      Methods[name].result.parse(await invoke(handlers, name, params)) as ResultOf<typeof name>,
    close: () => store.close(),
  };
}
