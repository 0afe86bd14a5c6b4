/**
 * Where the daemon's Python packages are (the trainer worker, the capture sitecustomize): trainer-daemon/python,
 * beside this module in the checkout, or beside the bundles in dist/ (the VSIX ships trainer-daemon/python).
 * Every room that starts Python with them on its PYTHONPATH (training, runner) reads it here.
 */
import path from 'node:path';

export const PYTHON_PACKAGE_DIR = path.resolve(
  __dirname,
  '..',
  path.basename(__dirname) === 'dist' ? 'trainer-daemon' : '',
  'python',
);

/** `PYTHONPATH` with the daemon's Python packages first. */
export function withPythonPackages(pythonPath: string | undefined = process.env.PYTHONPATH): string {
  return [PYTHON_PACKAGE_DIR, pythonPath].filter(Boolean).join(path.delimiter);
}
