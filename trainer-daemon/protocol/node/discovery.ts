/**
 * Finding the daemon that owns a store through its discovery files (`daemon.json` + `daemon.token`
 * beside the store): read by the CLI, `lightning run` and the extension, so it lives in the protocol
 * module. Writing them is the daemon's business (../../storeOwnership.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { DiscoveryFile, UpgradingFile } from '../daemon';

export interface DiscoveryPaths {
  readonly info: string;
  readonly token: string;
  /** Present only while a daemon upgrades the store before it is ready (UpgradingFile). */
  readonly upgrading: string;
}

export function discoveryPaths(storeFile: string): DiscoveryPaths {
  const dir = path.dirname(path.resolve(storeFile));
  return {
    info: path.join(dir, 'daemon.json'),
    token: path.join(dir, 'daemon.token'),
    upgrading: path.join(dir, 'daemon.upgrading'),
  };
}

/** The daemon upgrading `storeFile` before it is ready, if one is (its pid alive). */
export function findUpgrading(storeFile: string): UpgradingFile | undefined {
  const file = discoveryPaths(storeFile).upgrading;
  try {
    if (!ownedByUs(file)) return undefined;
    const parsed = UpgradingFile.safeParse(JSON.parse(fs.readFileSync(file, 'utf8')));
    return parsed.success && isProcessAlive(parsed.data.pid) ? parsed.data : undefined;
  } catch {
    return undefined;
  }
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
  if (!path.isAbsolute(info.store) || info.store !== path.resolve(storeFile) || !isProcessAlive(info.pid))
    return undefined;
  try {
    return { info, token: fs.readFileSync(paths.token, 'utf8').trim() };
  } catch {
    return undefined;
  }
}
