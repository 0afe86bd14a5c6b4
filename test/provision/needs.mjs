// What a test file needs beyond `npm ci`, as it declares in a comment line near its top:
//   // needs: torch, venv
// test/run.mjs provisions the union of the chosen files' needs, and `npm test -- fast` takes the unit and
// integration files that declare none. test/unit/testNeeds.test.ts checks the declarations against what the
// files use; the fast tier runs with PyTorch hidden (torchShim), so a file that needs it and does not say so fails.
import fs from 'node:fs';
import path from 'node:path';

/** Each need and what provides it (test/run.mjs#provision). */
export const NEEDS = {
  torch: "Debian's PyTorch (python3-torch), for the daemon's training tests on the tiny policy",
  venv: 'the test venv (trainer-daemon/python/requirements-test.txt) as LIGHTNING_TEST_PYTHON: PyTorch 2, transformers, peft, the Python SDKs',
  ray: 'a local Ray head from the test venv (these files run one at a time, after the others)',
  node24: 'Node 24 as LIGHTNING_NODE24 (node:sqlite, the editor runtime)',
  unzip: "unzip, to read each VSIX's files",
  root: 'root: a mount namespace or a tmpfs',
  editor: "the e2e suite's VS Code builds and browser driver",
};

const DECLARATION = /^\/\/ needs: (.+)$/m;

/** The needs a test file declares (e2e files always need the editors, the trainer and the venv). */
export function needsOf(file) {
  const text = fs.readFileSync(file, 'utf8');
  const declared =
    text
      .match(DECLARATION)?.[1]
      .split(',')
      .map((need) => need.trim())
      .filter(Boolean) ?? [];
  for (const need of declared) {
    if (!(need in NEEDS))
      throw new Error(
        `${file}: unknown need "${need}" in its "// needs:" line (known: ${Object.keys(NEEDS).join(', ')})`,
      );
  }
  const needs = new Set(declared);
  if (file.split(path.sep).includes('e2e')) for (const need of ['editor', 'torch', 'venv']) needs.add(need);
  if (needs.has('ray')) needs.add('venv');
  return needs;
}

/**
 * A folder to put first on PYTHONPATH that hides PyTorch: `import torch` fails naming the declaration to add.
 * The fast tier runs with it, so "needs no PyTorch" holds on a machine that has one installed.
 */
export function torchShim(dir) {
  const pkg = path.join(dir, 'torch');
  fs.mkdirSync(pkg, { recursive: true });
  fs.writeFileSync(
    path.join(pkg, '__init__.py'),
    'raise ImportError("PyTorch is hidden in the fast test tier (npm test -- fast): a test that trains declares it with a line \'// needs: torch\' (test/provision/needs.mjs)")\n',
  );
  return dir;
}
