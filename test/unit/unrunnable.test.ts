/**
 * Whether an agent command can be run, checked before a batch starts (runner/processPool.ts#unrunnable), the way the
 * spawn itself searches: a path against the working directory, a name on PATH (an empty entry is the working
 * directory, a relative one relative to it), no PATH at all left to the spawn's default.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { unrunnable } from '../../trainer-daemon/runner/processPool';
import { tempDir } from '../helpers/tmp';

test('unrunnable: not there, not executable, or found as the spawn would find it', (t) => {
  const cwd = tempDir(t);
  fs.mkdirSync(path.join(cwd, 'bin'));
  fs.writeFileSync(path.join(cwd, 'bin', 'agent'), '#!/bin/sh\n', { mode: 0o755 });
  fs.writeFileSync(path.join(cwd, 'agent'), '#!/bin/sh\n', { mode: 0o755 });
  fs.writeFileSync(path.join(cwd, 'notes.txt'), 'x', { mode: 0o644 });
  assert.equal(unrunnable('./bin/agent', cwd, '/nowhere'), undefined);
  assert.equal(unrunnable(path.join(cwd, 'agent'), '/', '/nowhere'), undefined);
  assert.equal(unrunnable('./missing', cwd, '/nowhere'), 'no such file');
  assert.equal(unrunnable('./notes.txt', cwd, '/nowhere'), 'not an executable file');
  assert.equal(unrunnable('./bin', cwd, '/nowhere'), 'not an executable file', 'a folder');
  assert.equal(unrunnable('agent', cwd, `/nowhere${path.delimiter}${path.join(cwd, 'bin')}`), undefined);
  assert.equal(unrunnable('agent', cwd, '/nowhere'), 'not found on PATH');
  assert.equal(unrunnable('agent', cwd, `/nowhere${path.delimiter}`), undefined, 'an empty entry: the working folder');
  assert.equal(unrunnable('agent', cwd, 'bin'), undefined, 'a relative entry: against the working folder');
  assert.equal(unrunnable('sh', cwd, undefined), undefined, "no PATH: the spawn's default, not checked");
});
