/**
 * Which program runs the daemon. better-sqlite3 is bound to one V8 ABI, so the choice matters:
 * the `lightning.nodePath` setting first, else a `node` ≥ 20 on PATH, else VS Code's own runtime
 * with ELECTRON_RUN_AS_NODE (the daemon then checks its native modules and says what to set).
 * The resolution is pure over a version probe, so it is unit-tested without spawning anything.
 */
import { execFile } from 'node:child_process';

export const MIN_NODE_MAJOR = 20;

export interface DaemonRuntime {
  readonly command: string;
  /** Added to the daemon's environment. */
  readonly env: Readonly<Record<string, string>>;
  /** For logs and messages: which runtime and why. */
  readonly description: string;
}

export type RuntimeResolution = { readonly ok: true; readonly runtime: DaemonRuntime } | { readonly ok: false; readonly message: string };

/** Runs `command --version`; resolves with its output (`v20.11.1`), or undefined when it cannot run. */
export type VersionProbe = (command: string) => Promise<string | undefined>;

export function nodeMajor(version: string | undefined): number | undefined {
  const match = /^v?(\d+)\./.exec(version?.trim() ?? '');
  return match ? Number(match[1]) : undefined;
}

export async function resolveRuntime(options: { nodePath: string | undefined; hostExecPath: string; probe: VersionProbe }): Promise<RuntimeResolution> {
  const { nodePath, hostExecPath, probe } = options;
  if (nodePath) {
    const version = await probe(nodePath);
    const major = nodeMajor(version);
    if (major === undefined) return { ok: false, message: `"lightning.nodePath" is ${nodePath}, which does not run as Node (\`${nodePath} --version\` failed). Point it at a Node ≥ ${MIN_NODE_MAJOR} binary, or clear it.` };
    if (major < MIN_NODE_MAJOR) return { ok: false, message: `"lightning.nodePath" is ${nodePath}, Node ${version?.trim()}; the daemon needs Node ≥ ${MIN_NODE_MAJOR}.` };
    return { ok: true, runtime: { command: nodePath, env: {}, description: `Node ${version?.trim()} from lightning.nodePath (${nodePath})` } };
  }
  const onPath = await probe('node');
  const major = nodeMajor(onPath);
  if (major !== undefined && major >= MIN_NODE_MAJOR) return { ok: true, runtime: { command: 'node', env: {}, description: `Node ${onPath?.trim()} on PATH` } };
  const why = major === undefined ? 'no node on PATH' : `node on PATH is ${onPath?.trim()}, older than ${MIN_NODE_MAJOR}`;
  return { ok: true, runtime: { command: hostExecPath, env: { ELECTRON_RUN_AS_NODE: '1' }, description: `the editor's own runtime (${hostExecPath}) as Node, because ${why}` } };
}

export const probeVersion: VersionProbe = (command) =>
  new Promise((resolve) => {
    execFile(command, ['--version'], { timeout: 5_000, env: { ...process.env, ELECTRON_RUN_AS_NODE: '1' } }, (error, stdout) => resolve(error ? undefined : stdout));
  });
