/**
 * One daemon per store, and how the others find it: the store's lock (`daemon.lock`), and the discovery files the
 * owner writes beside the store, `daemon.json` (url, pid, store) and `daemon.token` (mode 0600), so that `lightning
 * run`, the CLI and the extension find the daemon that owns a store. Reading them is `protocol/node/discovery.ts`; a
 * file left by a daemon that died is recognised there (its pid is gone) and ignored.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { ensurePrivateDir } from './util/privateFiles';
import path from 'node:path';
import {
  discoveryPaths,
  findDaemon,
  findUpgrading,
  isProcessAlive,
  type DiscoveryPaths,
} from './protocol/node/discovery';
import type { DiscoveryFile, UpgradingFile } from './protocol';
import { ConflictError } from './protocol/errors';
import type { StoreUpgrade } from './store/migrations';

export function newToken(): string {
  return crypto.randomBytes(32).toString('base64url');
}

/** Another daemon holds (or is taking) the store's lock: find it through its discovery file and use it. */
export class StoreOwnedError extends ConflictError {}

/**
 * Takes the store's daemon lock (`daemon.lock`, created exclusively, holding our pid): of several
 * daemons starting at once, exactly one gets it. A lock left by a dead process is taken over.
 * Returns the function that releases it.
 */
export function acquireStoreLock(storeFile: string): () => void {
  const lock = path.join(path.dirname(path.resolve(storeFile)), 'daemon.lock');
  ensurePrivateDir(path.dirname(lock));
  for (let attempt = 0; attempt < 3; attempt += 1) {
    try {
      fs.writeFileSync(lock, String(process.pid), { flag: 'wx', mode: 0o600 });
      return () => {
        if (fs.readFileSync(lock, 'utf8') === String(process.pid)) fs.rmSync(lock, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number(fs.readFileSync(lock, 'utf8'));
      if (Number.isInteger(holder) && holder > 0 && isProcessAlive(holder)) {
        const owner = findDaemon(storeFile);
        const upgrading = findUpgrading(storeFile);
        throw new StoreOwnedError(
          upgrading
            ? `another Lightning daemon (pid ${holder}) is upgrading ${storeFile} (${upgrading.spans} spans); use it once it is ready`
            : `another Lightning daemon (pid ${holder}${owner ? `, ${owner.info.url}` : ''}) already owns ${storeFile}; stop it or use --store`,
        );
      }
      fs.rmSync(lock, { force: true });
    }
  }
  throw new StoreOwnedError(`could not take the lock on ${storeFile}; is another daemon starting?`);
}

/** Writes both files atomically (temp file + rename); the caller holds the store lock (acquireStoreLock). */
export function writeDiscovery(
  storeFile: string,
  info: Omit<DiscoveryFile, 'tokenFile'>,
  token: string,
): DiscoveryPaths {
  const paths = discoveryPaths(storeFile);
  ensurePrivateDir(path.dirname(paths.info));
  writeAtomic(paths.token, `${token}\n`, 0o600);
  writeAtomic(paths.info, `${JSON.stringify({ ...info, tokenFile: paths.token }, null, 2)}\n`, 0o644);
  return paths;
}

/**
 * Says (`daemon.upgrading`) that this daemon, holding the store's lock, upgrades the store before it is ready: other
 * windows wait for it, commands do not upgrade it too. Returns the function that removes the file.
 */
export function markUpgrading(storeFile: string, upgrade: StoreUpgrade): () => void {
  const file = discoveryPaths(storeFile).upgrading;
  const marker: UpgradingFile = { pid: process.pid, ...upgrade };
  writeAtomic(file, `${JSON.stringify(marker)}\n`, 0o644);
  return () => fs.rmSync(file, { force: true });
}

/**
 * Refuses, before anything is changed, to upgrade a store that a daemon serves (one of an earlier Lightning, whose
 * queries the upgrade would break) or is upgrading itself: for commands that open the store directly.
 */
export function refuseUpgradeUnderDaemon(storeFile: string, upgrade: StoreUpgrade): void {
  const upgrading = findUpgrading(storeFile);
  if (upgrading)
    throw new ConflictError(
      `the Lightning daemon (pid ${upgrading.pid}) is upgrading ${storeFile} (${upgrading.spans} spans); run this again once it is ready`,
    );
  const daemon = findDaemon(storeFile);
  if (daemon)
    throw new ConflictError(
      `the Lightning daemon serving ${storeFile} (pid ${daemon.info.pid}, version ${daemon.info.version}) uses its schema ${upgrade.from}, which this Lightning would upgrade to ${upgrade.to} under it; stop that daemon (in the editor: Lightning: Restart Daemon; or end pid ${daemon.info.pid}), then run this again`,
    );
}

/** Removes the files if they are still ours (a newer daemon may have replaced them). */
export function removeDiscovery(paths: DiscoveryPaths, pid = process.pid): void {
  try {
    const info = JSON.parse(fs.readFileSync(paths.info, 'utf8')) as { pid?: unknown };
    if (info.pid !== pid) return;
  } catch {
    return;
  }
  fs.rmSync(paths.info, { force: true });
  fs.rmSync(paths.token, { force: true });
}

function writeAtomic(file: string, content: string, mode: number): void {
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, content, { mode });
  fs.chmodSync(temp, mode);
  fs.renameSync(temp, file);
}
