/**
 * dist/cli.js (trainer-daemon/cliLauncher.ts) runs the program beside it through a V8 code cache. Here the built
 * launcher runs a small program of its own in a temporary folder, as `node cli.js` runs the real one: the program
 * sees itself as a CommonJS module of that folder; the cache is written once, keyed by the program's content (a
 * rebuilt program of the same length never runs the old code); a cache V8 rejects, or one that cannot be written,
 * changes nothing the program does.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

const LAUNCHER = path.join(REPO_ROOT, 'dist', 'cli.js');
const CACHE = `.cli-main.${process.versions.v8}.v8cache`;

/** A program that says where it runs and what it was given, in `word` (same length for every word of 5 letters). */
const program = (word: string) => `
const helper = require('./helper.js');
module.exports.loaded = true;
console.log(JSON.stringify({ word: '${word}', dirname: __dirname, filename: __filename, isModule: module.exports.loaded,
  helper: helper(), argv: process.argv.slice(2) }));
if (process.argv.includes('--fail')) throw new Error('the program failed');
`;

function folder(t: Parameters<typeof tempDir>[0]): string {
  const dir = tempDir(t);
  fs.copyFileSync(LAUNCHER, path.join(dir, 'cli.js'));
  fs.writeFileSync(path.join(dir, 'helper.js'), 'module.exports = () => "helped";');
  fs.writeFileSync(path.join(dir, 'cli-main.js'), program('alpha'));
  return dir;
}

function launch(dir: string, ...args: string[]) {
  const run = spawnSync(process.execPath, [path.join(dir, 'cli.js'), ...args], { encoding: 'utf8' });
  return {
    code: run.status,
    stderr: run.stderr,
    out: run.stdout ? (JSON.parse(run.stdout) as Record<string, unknown>) : null,
  };
}

/** The program's word, from a run that exited 0 and wrote nothing on stderr. */
function quietly(run: ReturnType<typeof launch>): unknown {
  assert.deepEqual([run.code, run.stderr], [0, '']);
  return run.out!.word;
}

const keyOf = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest();

test('the launcher runs the program beside it as a CommonJS module of its folder, its arguments and failures its own', (t) => {
  const dir = folder(t);
  const run = launch(dir, 'show', '--json');
  assert.equal(run.code, 0, run.stderr);
  assert.deepEqual(run.out, {
    word: 'alpha',
    dirname: dir,
    filename: path.join(dir, 'cli-main.js'),
    isModule: true,
    helper: 'helped',
    argv: ['show', '--json'],
  });
  const failed = launch(dir, '--fail');
  assert.equal(failed.code, 1);
  assert.match(failed.stderr, /Error: the program failed\n\s+at .*cli-main\.js:\d+/);
});

test('the code cache is written once, keyed by the program: a rebuilt program of the same length runs its own code', (t) => {
  const dir = folder(t);
  const cache = path.join(dir, CACHE);
  assert.equal(launch(dir).code, 0);
  const written = fs.readFileSync(cache);
  assert.ok(written.subarray(0, 32).equals(keyOf(path.join(dir, 'cli-main.js'))));
  assert.ok(written.length > 32);
  // A second start reads the cache and leaves it as it was.
  const before = fs.statSync(cache).mtimeMs;
  assert.equal(quietly(launch(dir)), 'alpha');
  assert.equal(fs.statSync(cache).mtimeMs, before);
  // The same length, other code: V8 alone would take the old cache (it checks the length); the key does not.
  fs.writeFileSync(path.join(dir, 'cli-main.js'), program('omega'));
  assert.equal(quietly(launch(dir)), 'omega');
  assert.ok(
    fs
      .readFileSync(cache)
      .subarray(0, 32)
      .equals(keyOf(path.join(dir, 'cli-main.js'))),
  );
  assert.deepEqual(
    fs.readdirSync(dir).filter((name) => name.endsWith('.tmp')),
    [],
  );
});

test('a cache V8 rejects is written again; one that cannot be written leaves the program running without it', (t) => {
  const dir = folder(t);
  const cache = path.join(dir, CACHE);
  // The right key before data that is not a V8 cache: V8 rejects it, the program runs, the cache is replaced.
  fs.writeFileSync(cache, Buffer.concat([keyOf(path.join(dir, 'cli-main.js')), Buffer.from('not a code cache')]));
  assert.equal(quietly(launch(dir)), 'alpha');
  assert.ok(fs.statSync(cache).size > 32 + 'not a code cache'.length);
  // A folder where the cache would go: the rename fails (as on a read-only disk), the program runs all the same.
  fs.rmSync(cache);
  fs.mkdirSync(cache);
  for (let i = 0; i < 2; i += 1) assert.equal(quietly(launch(dir, 'again')), 'alpha');
  assert.deepEqual(
    fs.readdirSync(dir).filter((name) => name.endsWith('.tmp')),
    [],
  );
});
