import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { lockBatch } from '../../trainer-daemon/runner/batchLock';
import { tempDir } from '../helpers/tmp';

/** A process that takes the folder's lock, says so, and holds it until it is killed. */
function holder(dir: string): Promise<{ kill(): Promise<void> }> {
  const source = path.resolve(__dirname, '../../trainer-daemon/runner/batchLock.ts');
  const child = spawn(
    process.execPath,
    [
      '--require',
      'tsx/cjs',
      '-e',
      `const lock = require(${JSON.stringify(source)}).lockBatch(${JSON.stringify(dir)}); console.log(lock.held ? 'held' : 'not held'); setInterval(() => {}, 1000);`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const ended = new Promise((resolve) => child.once('close', resolve));
  return new Promise((resolve, reject) => {
    child.stdout.setEncoding('utf8').once('data', (line: string) => {
      if (line.trim() !== 'held') return reject(new Error(`the holder said: ${line}`));
      resolve({
        kill: async () => {
          child.kill('SIGKILL');
          await ended;
        },
      });
    });
  });
}

test("a batch's lock is held by one process at a time, and the system releases it when that process is killed", async (t) => {
  const dir = tempDir(t);
  const other = await holder(dir);
  t.after(() => other.kill());
  assert.deepEqual(lockBatch(dir), { held: false, reason: 'taken' });
  assert.deepEqual(lockBatch(dir), { held: false, reason: 'taken' }, 'asking again changes nothing');
  await other.kill();
  const mine = lockBatch(dir);
  assert.equal(mine.held, true);
  if (process.platform !== 'win32') assert.equal(fs.statSync(path.join(dir, 'runner.lock')).mode & 0o777, 0o600);
  if (mine.held) mine.release();
  const again = lockBatch(dir);
  assert.equal(again.held, true, 'taken again once released');
  if (again.held) again.release();
});

test('a lock that cannot be opened (its folder is missing) says why instead of throwing', (t) => {
  const lock = lockBatch(`${tempDir(t)}/missing`);
  assert.equal(lock.held, false);
  assert.equal(!lock.held && lock.reason, 'unavailable');
});
