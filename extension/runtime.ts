/**
 * Which program runs the daemon (and the CLI): the `lightning.nodePath` setting if set, else the
 * editor's own runtime — `process.execPath` with ELECTRON_RUN_AS_NODE in desktop VS Code, plain
 * Node in code-server. Any `node` on PATH is never used: its version would decide whether
 * Lightning works. The store needs `node:sqlite` (Node ≥ 22.13; VS Code ≥ 1.101 ships Node 22.15),
 * or a better-sqlite3 built for that very Node (a checkout on Node 20). Native Windows is not
 * supported: WSL is (see WINDOWS_MESSAGE). The resolution is pure over a version probe, so it is
 * unit-tested without spawning anything.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** The oldest Node whose `node:sqlite` needs no flag (22.13.0; 23.4.0 on the odd line). */
export const NODE_SQLITE_SINCE = '22.13.0';

export const WSL_DOCS = 'https://code.visualstudio.com/docs/remote/wsl';
export const WINDOWS_MESSAGE = `Lightning runs on Linux and macOS; on Windows, open your folder in WSL (${WSL_DOCS}) and install Lightning there.`;

export interface DaemonRuntime {
  readonly command: string;
  /** Added to the daemon's environment. */
  readonly env: Readonly<Record<string, string>>;
  /** For logs and messages: which runtime and why. */
  readonly description: string;
}

export type RuntimeResolution =
  { readonly ok: true; readonly runtime: DaemonRuntime } | { readonly ok: false; readonly message: string };

/** Runs `command --version`; resolves with its output (`v20.11.1`), or undefined when it cannot run. */
export type VersionProbe = (command: string) => Promise<string | undefined>;

/** The editor's own process: what runs the daemon when no setting says otherwise. */
export interface HostRuntime {
  readonly execPath: string;
  /** `process.versions`: `node`, and `electron` in desktop VS Code. */
  readonly versions: { readonly node: string; readonly electron?: string };
  readonly platform: NodeJS.Platform;
}

export function nodeMajor(version: string | undefined): number | undefined {
  const match = /^v?(\d+)\./.exec(version?.trim() ?? '');
  return match ? Number(match[1]) : undefined;
}

/** Whether Node `version` has `node:sqlite` without a flag. */
export function hasNodeSqlite(version: string | undefined): boolean {
  const match = /^v?(\d+)\.(\d+)\./.exec(version?.trim() ?? '');
  if (!match) return false;
  const [major, minor] = [Number(match[1]), Number(match[2])];
  return major >= 24 || (major === 23 && minor >= 4) || (major === 22 && minor >= 13);
}

export async function resolveRuntime(options: {
  nodePath: string | undefined;
  hostExecPath: string;
  probe: VersionProbe;
  /** Default: this process. */
  host?: HostRuntime;
  /** Whether a better-sqlite3 sits beside the extension (a checkout; the .vsix carries none). */
  betterSqlite3?: boolean;
}): Promise<RuntimeResolution> {
  const { nodePath, hostExecPath, probe } = options;
  const host = options.host ?? { execPath: hostExecPath, versions: process.versions, platform: process.platform };
  if (host.platform === 'win32') return { ok: false, message: WINDOWS_MESSAGE };
  if (nodePath) {
    const version = (await probe(nodePath))?.trim();
    if (nodeMajor(version) === undefined) {
      return {
        ok: false,
        message: `"lightning.nodePath" is ${nodePath}, which does not run as Node (\`${nodePath} --version\` failed). Clear the setting to use the editor's own runtime, or point it at Node ≥ ${NODE_SQLITE_SINCE}.`,
      };
    }
    if (!hasNodeSqlite(version) && !options.betterSqlite3) {
      return {
        ok: false,
        message: `"lightning.nodePath" is ${nodePath}, Node ${version}, which has no built-in SQLite (node:sqlite needs Node ≥ ${NODE_SQLITE_SINCE}). Clear the setting to use the editor's own runtime, or point it at Node ≥ ${NODE_SQLITE_SINCE}.`,
      };
    }
    return {
      ok: true,
      runtime: { command: nodePath, env: {}, description: `Node ${version} from lightning.nodePath (${nodePath})` },
    };
  }
  const electron = host.versions.electron;
  const what = electron
    ? `the editor's own runtime (${host.execPath}, Electron ${electron}, Node ${host.versions.node})`
    : `the editor's own runtime (${host.execPath}, Node ${host.versions.node})`;
  if (!hasNodeSqlite(host.versions.node) && !options.betterSqlite3) {
    return {
      ok: false,
      message: `${what} has no built-in SQLite (node:sqlite needs Node ≥ ${NODE_SQLITE_SINCE}): update VS Code to 1.103 or later (code-server 4.103 or later), or set "lightning.nodePath" to a Node ≥ ${NODE_SQLITE_SINCE}.`,
    };
  }
  return {
    ok: true,
    runtime: { command: host.execPath, env: electron ? { ELECTRON_RUN_AS_NODE: '1' } : {}, description: what },
  };
}

export const probeVersion: VersionProbe = (command) =>
  new Promise((resolve) => {
    execFile(
      command,
      ['--version'],
      { timeout: 5_000, env: { ...process.env, ELECTRON_RUN_AS_NODE: '1' } },
      (error, stdout) => resolve(error ? undefined : stdout),
    );
  });

/**
 * The runtime for `cliPath` (dist/cli.js) in this editor: resolveRuntime over this process and what sits beside the
 * bundle.
 */
export function resolveRuntimeFor(cliPath: string, nodePath: string | undefined): Promise<RuntimeResolution> {
  const betterSqlite3 = fs.existsSync(
    path.join(path.dirname(cliPath), '..', 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'),
  );
  return resolveRuntime({ nodePath, hostExecPath: process.execPath, probe: probeVersion, betterSqlite3 });
}
