/**
 * test/run.mjs runs the files that need nothing several to a process (grouped()): a member that fails or cannot load
 * is still counted and named, its failing test points at its own file, and the others in its group still run.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import test from 'node:test';

const repo = path.resolve(import.meta.dirname, '..', '..');

test('grouped test files: a failure and a file that cannot load are counted and named, the rest of the group runs', () => {
  const files = ['fails', 'cannot-load', 'passes'].map((name) => `test/fixtures/test-groups/${name}.test.ts`);
  // Without NODE_TEST_CONTEXT, which node's runner sets for its own files: a runner inside one would report to it.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const run = spawnSync(process.execPath, ['test/run.mjs', ...files], { cwd: repo, encoding: 'utf8', env });
  assert.equal(run.status, 1, run.stderr);
  const lines = run.stdout.trimEnd().split('\n');
  assert.equal(lines.at(-1), '1 passed, 2 failed', run.stdout);
  assert.match(run.stdout, /✔ a grouped test that passes/);
  assert.match(run.stdout, /test at test\/fixtures\/test-groups\/fails\.test\.ts:\d+:\d+\n✖ a grouped test that fails/);
  assert.match(run.stdout, /✖ test\/fixtures\/test-groups\/cannot-load\.test\.ts loads[\s\S]*this file cannot load/);
});
