/**
 * The extension packaged as users get it: `npm run package` for one target, built once per test process into
 * test-results/vsix/ (git-ignored) and reused by the files that install it. Test-only extensions of
 * test/fixtures/ are packaged the same way (vsce), to be installed beside it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
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

/** Packages the test-only extension in test/fixtures/<name> with vsce; resolves with the .vsix file. */
export async function buildFixtureVsix(name: string): Promise<string> {
  fs.mkdirSync(OUT, { recursive: true });
  const out = path.join(OUT, `fixture-${name}.vsix`);
  const vsce = path.join(REPO_ROOT, 'node_modules', '.bin', 'vsce');
  const result = await collect(
    spawn(vsce, ['package', '--no-dependencies', '--allow-missing-repository', '--skip-license', '--out', out], {
      cwd: path.join(REPO_ROOT, 'test', 'fixtures', name),
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  if (result.code !== 0 || !fs.existsSync(out))
    throw new Error(`vsce package of test/fixtures/${name} failed (exit ${result.code}): ${result.output}`);
  return out;
}

function collect(child: ChildProcess): Promise<{ code: number | null; output: string }> {
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, output })));
}

async function pack(target: string): Promise<string> {
  fs.mkdirSync(OUT, { recursive: true });
  const { code, output } = await collect(
    spawn('npm', ['run', '--silent', 'package', '--', target], {
      cwd: REPO_ROOT,
      env: { ...process.env, LIGHTNING_PACKAGE_OUT: OUT },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const vsix = fs
    .readdirSync(OUT)
    .filter((name) => name.endsWith(`-${target}.vsix`) || name.includes(`-${target}-`))
    .map((name) => path.join(OUT, name));
  if (code !== 0 || vsix.length !== 1)
    throw new Error(`npm run package -- ${target} failed (exit ${code}, ${vsix.length} files): ${output}`);
  return vsix[0]!;
}
