/**
 * The extension packaged as users get it: `npm run package` for one target, built once per test process into
 * test-results/vsix/ (git-ignored) and reused by the files that install it.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './daemon';

const OUT = path.join(REPO_ROOT, 'test-results', 'vsix');
const built = new Map<string, Promise<string>>();

/** Packages the extension for `target` (e.g. linux-x64); resolves with the .vsix file. */
export function buildVsix(target: string): Promise<string> {
  let file = built.get(target);
  if (!file) {
    file = pack(target);
    built.set(target, file);
  }
  return file;
}

async function pack(target: string): Promise<string> {
  fs.mkdirSync(OUT, { recursive: true });
  const child = spawn('npm', ['run', '--silent', 'package', '--', target], { cwd: REPO_ROOT, env: { ...process.env, LIGHTNING_PACKAGE_OUT: OUT }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const vsix = fs.readdirSync(OUT).filter((name) => name.endsWith(`-${target}.vsix`) || name.includes(`-${target}-`)).map((name) => path.join(OUT, name));
  if (code !== 0 || vsix.length !== 1) throw new Error(`npm run package -- ${target} failed (exit ${code}, ${vsix.length} files): ${output}`);
  return vsix[0]!;
}
