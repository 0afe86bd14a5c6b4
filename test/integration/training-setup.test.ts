// needs: torch
/** `lightning doctor --setup` (Set Up Trainer): the project's venv, made from the system Python. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

test('lightning doctor --setup creates .lightning/venv with the system packages, which the trainer then uses', async (t) => {
  const cwd = tempDir(t);
  const setup = await runCli(['doctor', '--setup', '--json'], { cwd, env: { LIGHTNING_PYTHON: '' } });
  assert.equal(setup.code, 0, setup.stderr);
  assert.match(setup.stderr, /-m venv --system-site-packages --without-pip/);
  const venvPython = path.join(cwd, '.lightning', 'venv', 'bin', 'python');
  assert.ok(fs.existsSync(venvPython));
  const report = JSON.parse(setup.stdout) as {
    chosen: { executable: string; origin: string; torch: string | null } | null;
  };
  assert.deepEqual([report.chosen?.executable, report.chosen?.origin], [venvPython, 'venv']);
  assert.ok(report.chosen?.torch, 'torch comes from the system site packages, nothing downloaded');
  // Run again: the venv is kept, nothing to install.
  const again = await runCli(['doctor', '--setup'], { cwd, env: { LIGHTNING_PYTHON: '' } });
  assert.equal(again.code, 0, again.stderr);
  assert.doesNotMatch(again.stderr, /-m venv|pip install/);
});
