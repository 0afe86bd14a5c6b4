/**
 * Where the capture preloads are: the Node one (nodePreload.ts) as `capture-preload.js` beside the running
 * bundle (`dist/cli.js`, which `lightning run` and the daemon are), the Python one as the folder holding its
 * `sitecustomize.py` (`trainer-daemon/python/lightning_capture`, beside `dist/` in a checkout and the .vsix).
 * Where one is missing (run from source without a build) agents go without it.
 */
import fs from 'node:fs';
import path from 'node:path';

export interface CapturePreloads {
  readonly nodePreload?: string;
  readonly pythonSiteDir?: string;
}

export function capturePreloads(): CapturePreloads {
  const file = path.join(__dirname, 'capture-preload.js');
  const root = path.basename(__dirname) === 'dist' ? path.dirname(__dirname) : path.resolve(__dirname, '..', '..');
  const site = path.join(root, 'trainer-daemon', 'python', 'lightning_capture');
  return {
    ...(fs.existsSync(file) ? { nodePreload: file } : {}),
    ...(fs.existsSync(path.join(site, 'sitecustomize.py')) ? { pythonSiteDir: site } : {}),
  };
}
