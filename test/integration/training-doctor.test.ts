// needs: torch
/** `lightning doctor`: the real Python found and reported, with what is missing and the fixes. */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

interface DoctorJson {
  chosen: { executable: string; origin: string; torch: string | null } | null;
  candidates: Array<{ executable: string; problem: string | null }>;
  report: {
    executable: string;
    torch: string | null;
    blas: string | null;
    problems: Array<{ problem: string; optional?: boolean }>;
  } | null;
  problems: Array<{ problem: string; fix: string; optional?: boolean }>;
}

test('lightning doctor finds the Python with torch, reports what it has, and names what is wrong with a given one', async (t) => {
  const cwd = tempDir(t);
  const found = await runCli(['doctor', '--json'], { cwd, env: { LIGHTNING_PYTHON: '' } });
  assert.equal(found.code, 0, found.stderr);
  const report = JSON.parse(found.stdout) as DoctorJson;
  assert.equal(report.chosen?.executable, '/usr/bin/python3');
  assert.match(report.chosen?.torch ?? '', /^\d+\.\d+/);
  // The worker package's own report on that Python: torch, its BLAS, and only optional problems (no GPU, no HF).
  assert.equal(report.report?.executable, '/usr/bin/python3');
  assert.equal(report.report?.blas, 'openblas');
  assert.ok(
    report.problems.every((p) => p.optional),
    JSON.stringify(report.problems),
  );
  // The venv comes first, but there is none yet.
  assert.deepEqual(report.candidates[0], { ...report.candidates[0], problem: 'not found' });

  const text = await runCli(['doctor'], { cwd });
  assert.match(text.stdout, /^Python\s+\/usr\/bin\/python3 \(system\) 3\./m);
  assert.match(text.stdout, /^torch\s+\d.*\(BLAS: openblas\)/m);
  assert.match(text.stdout, /^The trainer is ready\.$/m);

  const missing = await runCli(['doctor', '--python', path.join(cwd, 'no-python')], { cwd });
  assert.equal(missing.code, 1);
  assert.match(missing.stdout, /no-python \(--python\): not found/);
  assert.match(
    missing.stdout,
    /To fix:[\s\S]*lightning doctor --setup[\s\S]*apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread/,
  );
});
