// What a test run provisions for its files (test/run.mjs): the union of their needs (needs.mjs), installed with
// index.mjs, and the environment the tests get. Run in a worker thread (worker.mjs) while the files that need nothing
// run, or in line.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  ensureApt,
  ensureBrowserDriver,
  ensureEditor,
  ensureNode,
  ensurePythonVenv,
  EDITORS,
  ProvisionError,
  REPO,
} from './index.mjs';
import { needsOf, torchShim } from './needs.mjs';

/**
 * Refuses a run that has files needing root when it is not root, before anything is installed or run.
 * @param {readonly string[]} files
 */
export function checkRoot(files) {
  const rootOnly = files.filter((file) => needsOf(file).has('root'));
  if (rootOnly.length > 0 && process.getuid?.() !== 0) {
    throw new ProvisionError(
      `${rootOnly.map((file) => path.relative(REPO, file)).join(' and ')} need root (a mount namespace, a tmpfs). Run:\n  sudo npm test\nor run the other suites: npm test -- fast unit python node24`,
    );
  }
}

/**
 * The environment of the fast tier's files: PyTorch hidden, so a file in it that quietly needs it fails instead of
 * passing where it is installed; no test venv, no Node 24.
 */
export function fastEnv() {
  const shim = torchShim(fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-fast-')));
  return {
    PYTHONPATH: [shim, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
    LIGHTNING_TEST_PYTHON: '',
    LIGHTNING_NODE24: '',
  };
}

/**
 * Installs (or finds) everything `files` and the Python and Node 24 suites need; returns the env the tests get.
 * @param {{ files: readonly string[]; python: boolean; node24: boolean }} run
 */
export function provisionFor({ files, python, node24 }) {
  checkRoot(files);
  const env = {};
  const needs = new Set(files.flatMap((file) => [...needsOf(file)]));
  if (python) needs.add('venv');
  if (node24) needs.add('node24');
  const apt = [];
  // The trainer worker in the daemon's tests and the demo runs on Debian's PyTorch (fast on few cores).
  if (needs.has('torch')) {
    apt.push({ name: 'python3-torch', why: "the trainer worker's PyTorch in the training tests" });
    apt.push({ name: 'libopenblas0-pthread', why: 'a fast BLAS for that PyTorch (the reference BLAS is ~15x slower)' });
  }
  if (needs.has('unzip')) apt.push({ name: 'unzip', why: "the package test reads each VSIX's files" });
  if (apt.length > 0) ensureApt(apt);
  // PyTorch 2 + transformers + peft + trl, Ray and the agent SDKs: pytest, the Ray and the Python SDK tests run on it.
  if (needs.has('venv')) env.LIGHTNING_TEST_PYTHON = ensurePythonVenv();
  if (needs.has('node24')) env.LIGHTNING_NODE24 = ensureNode(24).node;
  if (needs.has('editor')) {
    env.LIGHTNING_E2E_DRIVER = ensureBrowserDriver();
    for (const which of Object.keys(EDITORS)) {
      const editor = ensureEditor(which);
      env[`LIGHTNING_E2E_CODE_SERVER_${which.toUpperCase()}`] = editor.codeServer;
      env[`LIGHTNING_E2E_PATH_${which.toUpperCase()}`] = editor.env.PATH;
    }
  }
  return env;
}
