/**
 * The demo's store needs a SQLite driver: node:sqlite (Node ≥ 22.13) or better-sqlite3. better-sqlite3 is an
 * optional dependency because npm cannot build it everywhere: node-gyp needs the running Node's headers and,
 * without a configured `nodedir`, downloads them, which fails offline (an unprivileged user on a machine without
 * internet). Then `npm ci` leaves it out and the demo builds it against the headers installed beside Node
 * (<prefix>/include/node), saying so.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { InvalidInputError } from '../protocol/errors';
import { chooseDriver } from '../store/driver';

/** The prefix whose include/node holds this Node's own headers (same version), or undefined. */
export function localNodeHeaders(execPath = process.execPath, version = process.versions.node): string | undefined {
  const prefix = path.resolve(path.dirname(execPath), '..');
  const header = path.join(prefix, 'include', 'node', 'node_version.h');
  if (!fs.existsSync(header)) return undefined;
  const text = fs.readFileSync(header, 'utf8');
  const part = (name: string): string | undefined => new RegExp(`#define ${name} (\\d+)`).exec(text)?.[1];
  return `${part('NODE_MAJOR_VERSION')}.${part('NODE_MINOR_VERSION')}.${part('NODE_PATCH_VERSION')}` === version
    ? prefix
    : undefined;
}

/**
 * Whether the checkout has a built better-sqlite3. Read from the file system, not require.resolve: Node caches a
 * package.json it did not find, so a resolution tried before the build would keep failing after it.
 */
function betterSqlite3Installed(root: string): boolean {
  return fs.existsSync(path.join(root, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'));
}

/** Makes sure the store can open here: builds better-sqlite3 in the checkout `root` when npm ci could not. */
export function ensureSqliteDriver(root: string, say: (text: string) => void): void {
  if (chooseDriver() === 'node:sqlite' || betterSqlite3Installed(root)) return;
  const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    optionalDependencies?: Record<string, string>;
  };
  const spec = manifest.optionalDependencies?.['better-sqlite3'];
  const headers = localNodeHeaders();
  if (!spec || !headers) {
    throw new InvalidInputError(
      `Node ${process.version} has no node:sqlite and better-sqlite3 is not installed (npm could not build it: node-gyp found no Node headers). ` +
        "Install this Node's headers (Debian/Ubuntu: they come with Node in <prefix>/include/node) and run `npm ci` again, or run the demo on Node ≥ 22.13.",
    );
  }
  say(
    `  sqlite    npm ci could not build better-sqlite3 (node-gyp had no Node headers configured): building it against ${path.join(headers, 'include', 'node')} (about a minute)`,
  );
  const npm = spawnSync(
    'npm',
    [
      'install',
      '--no-save',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      `--nodedir=${headers}`,
      `better-sqlite3@${spec}`,
    ],
    { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] },
  );
  if (npm.status !== 0 || !betterSqlite3Installed(root)) {
    throw new InvalidInputError(
      `building better-sqlite3 failed (npm exited ${npm.status ?? npm.signal}); see npm's output above`,
    );
  }
}
