/**
 * The files Debug with Lightning preloads into a debuggee, found in the extension's folder as
 * trainer-daemon/capture/preloadFile.ts finds them for `lightning run`: the exit-code recorder (dist/exit-code.js)
 * and the capture preloads (dist/capture-preload.js; trainer-daemon/python/lightning_capture, which holds the
 * sitecustomize.py). One that is not there (an extension run from source before `npm run build`, a package that
 * lost it) is left out and named: Node stops at its start when a `--require` file is missing, so every Node
 * debuggee would crash, where without the preload it only runs unrecorded by it.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { CapturePreloads } from './launchConfig';

export interface DebugPreloads {
  /** dist/exit-code.js, preloaded into Node debuggees; absent when missing. */
  readonly exitCode?: string;
  readonly capture: CapturePreloads;
}

/** The preloads under `extensionRoot` that exist, and the paths of those that do not. */
export function debugPreloads(extensionRoot: string): { preloads: DebugPreloads; missing: string[] } {
  const exitCode = path.join(extensionRoot, 'dist', 'exit-code.js');
  const nodePreload = path.join(extensionRoot, 'dist', 'capture-preload.js');
  const pythonSiteDir = path.join(extensionRoot, 'trainer-daemon', 'python', 'lightning_capture');
  const sitecustomize = path.join(pythonSiteDir, 'sitecustomize.py');
  const isFile = (file: string): boolean => fs.statSync(file, { throwIfNoEntry: false })?.isFile() ?? false;
  return {
    preloads: {
      ...(isFile(exitCode) ? { exitCode } : {}),
      capture: {
        ...(isFile(nodePreload) ? { nodePreload } : {}),
        ...(isFile(sitecustomize) ? { pythonSiteDir } : {}),
      },
    },
    missing: [exitCode, nodePreload, sitecustomize].filter((file) => !isFile(file)),
  };
}
