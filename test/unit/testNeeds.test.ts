/**
 * Each test file's `// needs:` line (test/provision/needs.mjs) matches what it uses, so `npm test -- fast` (the files
 * that declare none, run with nothing provisioned) never takes one that needs the venv, Ray, Node 24 or root; PyTorch
 * is held by the fast tier itself, which hides it (checked here too).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { needsOf, torchShim } from '../provision/needs.mjs';

const repo = path.resolve(import.meta.dirname, '..', '..');

function testFiles(dir: string): string[] {
  return fs
    .readdirSync(path.join(repo, 'test', dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => path.join(entry.parentPath, entry.name));
}

/** What a file's text shows it uses → the need it must declare. */
const USES: ReadonlyArray<{ need: string; pattern: RegExp; what: string }> = [
  { need: 'venv', pattern: /LIGHTNING_TEST_PYTHON/, what: 'reads LIGHTNING_TEST_PYTHON' },
  {
    need: 'venv',
    pattern: /import \{[^}]*\bpython\b[^}]*\} from '\.\.\/helpers\/providerAgents'/,
    what: "runs Python agents (helpers/providerAgents' python)",
  },
  {
    need: 'venv',
    pattern: /from '\.\.\/helpers\/(tinyHf|twoRoles|twoRoleWorld)'/,
    what: 'trains a tiny Hugging Face model (helpers/tinyHf, helpers/twoRoles, helpers/twoRoleWorld)',
  },
  { need: 'ray', pattern: /from '\.\.\/helpers\/ray'/, what: 'starts a Ray head (helpers/ray)' },
  { need: 'node24', pattern: /LIGHTNING_NODE24/, what: 'reads LIGHTNING_NODE24' },
  { need: 'root', pattern: /getuid\?\.\(\) === 0|\bunshare\b|mount -t tmpfs/, what: 'needs root' },
  { need: 'unzip', pattern: /'unzip'/, what: 'runs unzip' },
];

/** The uses a file's text shows that its declaration lacks. */
function undeclared(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const needs = needsOf(file);
  return USES.filter(({ need, pattern }) => pattern.test(text) && !needs.has(need)).map(
    ({ need, what }) => `${path.relative(repo, file)} ${what}: add "${need}" to its "// needs:" line`,
  );
}

test('every unit and integration file declares what it uses', () => {
  const files = [...testFiles('unit'), ...testFiles('integration'), ...testFiles('e2e')].filter(
    (file) => file !== import.meta.filename,
  );
  assert.ok(files.length > 40, `found ${files.length} test files`);
  assert.deepEqual(files.flatMap(undeclared), []);
});

test('the check fails on a file that uses the venv without saying so, and an unknown need is named', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'needs-'));
  const quiet = path.join(dir, 'quiet.test.ts');
  fs.writeFileSync(
    quiet,
    "const python = process.env.LIGHTNING_TEST_PYTHON;\nimport { startRayHead } from '../helpers/ray';\n",
  );
  assert.deepEqual(
    undeclared(quiet).map((line) => line.replace(/^.* (reads|starts)/, '$1')),
    [
      'reads LIGHTNING_TEST_PYTHON: add "venv" to its "// needs:" line',
      'starts a Ray head (helpers/ray): add "ray" to its "// needs:" line',
    ],
  );
  fs.writeFileSync(quiet, '// needs: ray\nconst python = process.env.LIGHTNING_TEST_PYTHON;\n');
  assert.deepEqual(undeclared(quiet), [], 'ray brings the venv');
  fs.writeFileSync(quiet, "import { saveTinyQwen } from '../helpers/tinyHf';\n");
  assert.deepEqual(
    undeclared(quiet).map((line) => line.replace(/^.* trains/, 'trains')),
    [
      'trains a tiny Hugging Face model (helpers/tinyHf, helpers/twoRoles, helpers/twoRoleWorld): add "venv" to its "// needs:" line',
    ],
    'the helpers that read LIGHTNING_TEST_PYTHON for the file',
  );
  fs.writeFileSync(quiet, '// needs: torch, gpu\n');
  assert.throws(() => needsOf(quiet), /unknown need "gpu" in its "\/\/ needs:" line \(known: torch, venv/);
});

test('the fast tier hides PyTorch: importing it fails naming the declaration', () => {
  const shim = torchShim(fs.mkdtempSync(path.join(os.tmpdir(), 'shim-')));
  const result = spawnSync('python3', ['-c', 'import torch'], {
    env: { ...process.env, PYTHONPATH: shim },
    encoding: 'utf8',
  });
  assert.notEqual(result.status, 0);
  assert.match(result.stderr, /PyTorch is hidden in the fast test tier .*'\/\/ needs: torch'/);
});
