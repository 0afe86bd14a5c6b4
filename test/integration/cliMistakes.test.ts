/**
 * The CLI against a user's mistakes, each answered with the documented exit code and a line naming the problem and
 * the fix, with nothing half-written or lost: `--out` onto the store, `--store` at a file that is no store or at a
 * folder, `--host` this machine cannot listen on, a list with no store, `dataset run` flags out of range or left
 * without the flag they belong to, a split with no tasks, `--ray` with a Python that has no ray, a JSON value too
 * large to hold, a folder no one may write in, a short id.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Store } from '../../trainer-daemon/store/store';
import { runCli } from '../helpers/daemon';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';

/** A store with one rollout and a dataset `math` of two train tasks. */
function seeded(dir: string): string {
  const file = path.join(dir, 'store.db');
  const store = Store.open(file);
  try {
    store.createRollout(parsed('createRollout', { label: 'kept' }));
    store.importDataset(
      parsed('importDataset', {
        name: 'math',
        tasks: [
          { id: 't1', input: { q: '1+1' }, expected: 2, split: 'train' },
          { id: 't2', input: { q: '2+2' }, expected: 4, split: 'train' },
        ],
      }),
    );
  } finally {
    store.close();
  }
  return file;
}

function rolloutCount(file: string): number {
  const store = Store.open(file, { readonly: true });
  try {
    return store.stats().rollouts;
  } finally {
    store.close();
  }
}

/** One line on stderr, `lightning: …`: no stack trace, no schema dump. */
function oneLine(stderr: string): string {
  const lines = stderr.trim().split('\n');
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0]!, /^lightning: /);
  return lines[0]!;
}

test('export --out onto the store (or its WAL) is refused: the store keeps its rollouts', async (t) => {
  const dir = tempDir(t);
  const file = seeded(dir);
  for (const out of [file, `${file}-wal`, path.relative(dir, file)]) {
    const result = await runCli(['export', '--store', file, '--out', out], { cwd: dir });
    assert.equal(result.code, 2, result.stderr);
    assert.match(oneLine(result.stderr), /--out .* is the store .*; name another file to write the rows to/);
  }
  assert.equal(rolloutCount(file), 1);
});

test('--store at a file that is no store, or at a folder: refused, the file untouched (its mode too)', async (t) => {
  const dir = tempDir(t);
  const notes = path.join(dir, 'notes.txt');
  fs.writeFileSync(notes, 'my notes\n', { mode: 0o644 });
  fs.chmodSync(notes, 0o644);
  const notStore = await runCli(['rollouts', '--store', notes]);
  assert.equal(notStore.code, 2);
  assert.match(oneLine(notStore.stderr), /notes\.txt is not a Lightning store \(not an SQLite file\).*--store FILE/);
  assert.equal(fs.statSync(notes).mode & 0o777, 0o644);
  assert.equal(fs.readFileSync(notes, 'utf8'), 'my notes\n');
  const folder = await runCli(['export', '--store', dir, '--out', path.join(dir, 'x.jsonl')]);
  assert.equal(folder.code, 2);
  assert.match(oneLine(folder.stderr), /is a folder, not a store/);
});

test('train --list with no store says so (exit 3) and creates none', async (t) => {
  const file = path.join(tempDir(t), 'nowhere', 'store.db');
  const result = await runCli(['train', '--list', '--store', file]);
  assert.equal(result.code, 3);
  assert.match(oneLine(result.stderr), /no store at .*store\.db/);
  assert.equal(fs.existsSync(file), false);
});

test('serve --host this machine cannot listen on: exits at once, exit 2, naming --host', async (t) => {
  const result = await runCli([
    'serve',
    '--store',
    path.join(tempDir(t), 'store.db'),
    '--host',
    'no-such-host.invalid',
  ]);
  assert.equal(result.code, 2, result.stdout + result.stderr);
  assert.match(result.stdout, /"event":"startup-failed".*"kind":"invalid_input"/);
  assert.match(result.stderr, /--host no-such-host\.invalid: cannot listen there/);
});

test('dataset run: flags out of range or stray, a split with no tasks, --ray without ray: refused before any rollout', async (t) => {
  const dir = tempDir(t);
  const file = seeded(dir);
  const run = (...flags: string[]) => runCli(['dataset', 'run', 'math', '--store', file, ...flags, '--', 'true']);
  const cases: Array<[string[], number, RegExp]> = [
    // A timeout past a week would have been a 1 ms timer.
    [['--timeout', '99999999999'], 2, /--timeout 99999999999: expected an integer ≥ 1 and ≤ 604800/],
    [['--samples', '100000000'], 2, /--samples 100000000: expected an integer ≥ 1 and ≤ 10000/],
    [['--split', 'val'], 2, /dataset math has no val tasks: leave out --split, or name a split it has/],
    [['--ray-working-dir', dir], 2, /--ray-working-dir applies with --ray only/],
    // A Python that cannot import ray: here one that is not there at all (said the same way as one without ray).
    [
      ['--ray', 'auto', '--ray-python', '/nonexistent/python3'],
      3,
      /--ray: \/nonexistent\/python3 cannot import ray \(.*ENOENT.*\); install it there/,
    ],
  ];
  for (const [flags, code, message] of cases) {
    const result = await run(...flags);
    assert.equal(result.code, code, `${flags.join(' ')}: ${result.stderr}`);
    assert.match(oneLine(result.stderr), message);
  }
  assert.equal(rolloutCount(file), 1, 'no batch was recorded');
});

test('resource put --kind json: a number too large to hold is said in words, not as schema issues', async (t) => {
  const dir = tempDir(t);
  const file = seeded(dir);
  for (const value of ['1e309', '{"a": [1e999]}']) {
    const result = await runCli(['resource', 'put', 'limits', '--kind', 'json', '--value', value, '--store', file]);
    assert.equal(result.code, 2);
    assert.match(oneLine(result.stderr), /--value: not valid JSON \(a number too large to hold, such as 1e309/);
  }
});

test('a folder no one may write in (sysfs), and a short id: said of what the user typed', async (t) => {
  const dir = tempDir(t);
  const file = seeded(dir);
  const unwritable = await runCli(['export', '--store', file, '--out', '/sys/rows.jsonl']);
  assert.equal(unwritable.code, 2, unwritable.stderr);
  assert.match(
    oneLine(unwritable.stderr),
    /--out \/sys\/rows\.jsonl: cannot write there \(.*\); name a file in a folder/,
  );
  const short = await runCli(['show', 'ro-', '--store', file]);
  assert.equal(short.code, 3);
  assert.match(oneLine(short.stderr), /a short id takes at least 4 characters/);
});
