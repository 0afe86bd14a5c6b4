/**
 * The lock a batch's runner holds while it runs (`<logDir>/runner.lock`): a SQLite database file held in an exclusive
 * transaction (SQLite keeps a `runner.lock-journal` beside it meanwhile). Taking it is atomic (of two `--resume`
 * started together, one gets it), and the operating system releases it when its process ends however it ends (a
 * crash, kill -9), so a dead runner never leaves a stale lock. runner.json (agentPids.ts) names the pid that holds it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { errorMessage } from '../protocol/errors';
import { openConnection, type Connection } from '../store/driver';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';

const LOCK_FILE = 'runner.lock';

/** SQLite's answer when another connection holds the lock (either driver's code or message). */
const HELD = /SQLITE_BUSY\b|database is locked/i;

export type BatchLock =
  /** This connection holds the lock until `release` or the process's end. */
  | { readonly held: true; release(): void }
  /** Another connection holds it (another runner's; or this process's own, taken twice). */
  | { readonly held: false; readonly reason: 'taken' }
  /**
   * It could not be opened or locked for another reason (no SQLite driver here, the folder missing or read-only, an
   * I/O error): the caller falls back to runner.json alone.
   */
  | { readonly held: false; readonly reason: 'unavailable'; readonly error: string };

/** Takes the lock of the batch whose log folder (which must exist) is `logDir`, without waiting for it. */
export function lockBatch(logDir: string): BatchLock {
  const file = path.join(logDir, LOCK_FILE);
  let connection: Connection;
  try {
    // SQLite creates the file. (Not opened here first: on POSIX systems closing any descriptor of a file drops every
    // lock this process holds on it.)
    connection = openConnection(file, { readonly: false });
  } catch (error) {
    return { held: false, reason: 'unavailable', error: errorMessage(error) };
  }
  const { db } = connection;
  try {
    db.pragma('busy_timeout = 0');
    // A rollback-journal database (the default): BEGIN EXCLUSIVE takes the file's exclusive lock at once.
    db.exec('BEGIN EXCLUSIVE');
  } catch (error) {
    db.close();
    const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code : '';
    if (HELD.test(`${code} ${errorMessage(error)}`)) return { held: false, reason: 'taken' };
    return { held: false, reason: 'unavailable', error: errorMessage(error) };
  }
  // It holds nothing, but it is the owner's, as the folder's other files are (a chmod closes no descriptor).
  try {
    fs.chmodSync(file, PRIVATE_FILE_MODE);
  } catch {
    // Not ours to change (a shared folder): the lock works all the same.
  }
  let released = false;
  return {
    held: true,
    release: () => {
      if (released) return;
      released = true;
      try {
        db.exec('ROLLBACK');
      } finally {
        db.close();
      }
    },
  };
}
