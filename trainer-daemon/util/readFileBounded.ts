/**
 * Reads a file a caller named (a rewards file, a tokenizer, demonstrations) with the checks a
 * daemon serving other processes needs: it must be a regular file (not `/dev/zero`, a FIFO or a
 * socket, which never end or block the event loop), no larger than `maxBytes`, and an error never
 * quotes the file's content (`/etc/passwd` named as a rewards file must not leak its first line).
 */
import fs from 'node:fs';
import { InvalidInputError, PayloadTooLargeError } from '../protocol/errors';

export function readFileBounded(file: string, maxBytes: number, what: string): string {
  let fd: number;
  try {
    // O_NONBLOCK: opening a FIFO with no writer must not hang the daemon before the check below.
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (error) {
    throw new InvalidInputError(
      `${what} ${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new InvalidInputError(`${what} ${file}: not a regular file; name a JSON file`);
    if (stat.size > maxBytes)
      throw new PayloadTooLargeError(`${what} ${file}: ${stat.size} bytes is over the ${maxBytes}-byte limit`);
    const buffer = Buffer.alloc(stat.size);
    let read = 0;
    while (read < buffer.length) {
      const n = fs.readSync(fd, buffer, read, buffer.length - read, read);
      if (n === 0) break;
      read += n;
    }
    return buffer.subarray(0, read).toString('utf8');
  } finally {
    fs.closeSync(fd);
  }
}

/** JSON.parse with an error that says where, never what (V8's message quotes the text around the fault). */
export function parseJsonText(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const at = /position \d+|line \d+ column \d+/.exec((error as Error).message)?.[0];
    throw new InvalidInputError(`${where}: not valid JSON${at ? ` (at ${at})` : ''}`);
  }
}
