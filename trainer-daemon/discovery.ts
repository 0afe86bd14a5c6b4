/**
 * The discovery files beside a store: `daemon.json` (url, pid, store) and `daemon.token` (mode
 * 0600), so that `lightning run`, the CLI and the extension find the daemon that owns a store. A
 * file left by a daemon that died is recognised (its pid is gone) and ignored.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { DiscoveryFile } from './protocol';
import { ConflictError } from './errors';

export interface DiscoveryPaths {
  readonly info: string;
  readonly token: string;
}

export function discoveryPaths(storeFile: string): DiscoveryPaths {
  const dir = path.dirname(path.resolve(storeFile));
  return { info: path.join(dir, 'daemon.json'), token: path.join(dir, 'daemon.token') };
}

export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    // ESRCH: gone. EPERM: the pid now belongs to another user's process, so not our daemon.
    return false;
  }
}

export interface LiveDaemon {
  readonly info: DiscoveryFile;
  readonly token: string;
}

/** A discovery file is trusted only when this user wrote it and nobody else could have. */
function ownedByUs(file: string): boolean {
  const stat = fs.statSync(file);
  return (process.getuid === undefined || stat.uid === process.getuid()) && (stat.mode & 0o022) === 0;
}

/**
 * The daemon that owns `storeFile`, if one is running. A discovery file from a clone, another user,
 * a daemon that died, or naming a non-loopback URL or another store is ignored.
 */
export function findDaemon(storeFile: string): LiveDaemon | undefined {
  const paths = discoveryPaths(storeFile);
  let info: DiscoveryFile;
  try {
    if (!ownedByUs(paths.info) || !ownedByUs(paths.token)) return undefined;
    const parsed = DiscoveryFile.safeParse(JSON.parse(fs.readFileSync(paths.info, 'utf8')));
    if (!parsed.success) return undefined;
    info = parsed.data;
  } catch {
    return undefined;
  }
  if (!path.isAbsolute(info.store) || info.store !== path.resolve(storeFile) || !isProcessAlive(info.pid)) return undefined;
  try {
    return { info, token: fs.readFileSync(paths.token, 'utf8').trim() };
  } catch {
    return undefined;
  }
}

export function newToken(): string {
  return crypto.randomBytes(32).toString('base64url');
}

/**
 * Takes the store's daemon lock (`daemon.lock`, created exclusively, holding our pid): of several
 * daemons starting at once, exactly one gets it. A lock left by a dead process is taken over.
 * Returns the function that releases it.
 */
export function acquireStoreLock(storeFile: string): () => void {
  const lock = path.join(path.dirname(path.resolve(storeFile)), 'daemon.lock');
  fs.mkdirSync(path.dirname(lock), { recursive: true });
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
        throw new ConflictError(`another Lightning daemon (pid ${holder}${owner ? `, ${owner.info.url}` : ''}) already owns ${storeFile}; stop it or use --store`);
      }
      fs.rmSync(lock, { force: true });
    }
  }
  throw new ConflictError(`could not take the lock on ${storeFile}; is another daemon starting?`);
}

/** Writes both files atomically (temp file + rename); the caller holds the store lock (acquireStoreLock). */
export function writeDiscovery(storeFile: string, info: Omit<DiscoveryFile, 'tokenFile'>, token: string): DiscoveryPaths {
  const paths = discoveryPaths(storeFile);
  fs.mkdirSync(path.dirname(paths.info), { recursive: true });
  writeAtomic(paths.token, `${token}\n`, 0o600);
  writeAtomic(paths.info, `${JSON.stringify({ ...info, tokenFile: paths.token }, null, 2)}\n`, 0o644);
  return paths;
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
