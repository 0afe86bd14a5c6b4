/**
 * What the daemon and CLI write holds prompts, answers and rollout keys: the store and its WAL,
 * agent logs, `agents.jsonl`, exports. They are created readable by their owner only (0600), in
 * folders only the owner can list (0700), whatever the umask — and never by replacing something
 * that is not a regular file (a device node, a FIFO, a symlink) at the path the user named.
 */
import fs from 'node:fs';
import path from 'node:path';
import { InvalidInputError } from '../protocol/errors';

export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_DIR_MODE = 0o700;

/** Creates `dir` (and parents) if needed; a `.lightning` folder is made private even when it exists. */
export function ensurePrivateDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  if (path.basename(dir) === '.lightning') chmodIfOwned(dir, PRIVATE_DIR_MODE);
}

/** Makes an existing file private if this user owns it (a store made by an older version was 0644). */
export function chmodIfOwned(file: string, mode: number): void {
  try {
    const stat = fs.statSync(file);
    if (typeof process.getuid !== 'function' || stat.uid === process.getuid()) fs.chmodSync(file, mode);
  } catch {
    // Not there (yet): created with the right mode by whoever makes it.
  }
}

const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');

/**
 * Refuses a path that is not a store before anything opens (or changes the mode of) it: a folder, or a file that is
 * neither empty nor SQLite (`--store notes.txt`).
 */
export function assertStorePath(file: string): void {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch {
    return; // a new store
  }
  if (stat.isDirectory())
    throw new InvalidInputError(`${file} is a folder, not a store: name the store's file (--store FILE)`);
  if (!stat.isFile())
    throw new InvalidInputError(`${file} is not a regular file, so not a store: name the store's file (--store FILE)`);
  if (stat.size === 0) return;
  const head = Buffer.alloc(SQLITE_HEADER.length);
  const fd = fs.openSync(file, 'r');
  try {
    fs.readSync(fd, head, 0, head.length, 0);
  } finally {
    fs.closeSync(fd);
  }
  if (!head.equals(SQLITE_HEADER))
    throw new InvalidInputError(
      `${file} is not a Lightning store (not an SQLite file): name a store's file or a new path (--store FILE)`,
    );
}

/** The store file and its WAL/shared-memory files: created 0600 (SQLite gives the WAL the main file's mode). */
export function preparePrivateStoreFile(file: string): void {
  if (file === ':memory:') return;
  assertStorePath(file);
  ensurePrivateDir(path.dirname(path.resolve(file)));
  fs.closeSync(fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT, PRIVATE_FILE_MODE));
  for (const suffix of ['', '-wal', '-shm']) chmodIfOwned(`${file}${suffix}`, PRIVATE_FILE_MODE);
}

/**
 * Writes `text` to `out` through a private temporary file renamed into place, so a reader never
 * sees half a file. `out` must be a regular file or not exist: a device, FIFO, socket or symlink is
 * refused (as root, renaming over `/dev/full` would replace the device). A failed write leaves no
 * temporary file behind.
 */
export function writeFileAtomically(out: string, text: string | Buffer, flag = '--out'): void {
  let stat: fs.Stats | undefined;
  try {
    stat = fs.lstatSync(out);
  } catch {
    stat = undefined;
  }
  if (stat && !stat.isFile()) {
    const what = stat.isSymbolicLink()
      ? 'a symbolic link'
      : stat.isDirectory()
        ? 'a folder'
        : 'not a regular file (a device, FIFO or socket)';
    throw new InvalidInputError(`${flag} ${out} is ${what}; name a regular file to write (or a new path)`);
  }
  const folder = path.dirname(path.resolve(out));
  if (!fs.existsSync(folder))
    throw new InvalidInputError(
      `${flag} ${out}: the folder ${folder} does not exist; create it first, or name a file in a folder that does`,
    );
  const temp = `${out}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(temp, text, { mode: PRIVATE_FILE_MODE, flag: 'wx' });
    fs.renameSync(temp, out);
  } catch (error) {
    fs.rmSync(temp, { force: true });
    // A folder this user may not write in is the path's fault: said of the path given, not of our temporary file.
    const code = (error as NodeJS.ErrnoException).code;
    if (flag.startsWith('--') && (code === 'EACCES' || code === 'EPERM' || code === 'EROFS'))
      throw new InvalidInputError(
        `${flag} ${out}: cannot write there (${code === 'EROFS' ? 'a read-only file system' : 'permission denied'}); name a file in a folder you can write to`,
      );
    throw error;
  }
}
