/**
 * Where the workspace's store lives: the `lightning.storePath` setting (relative to the first
 * workspace folder, `~` and `${workspaceFolder}` expanded), else `.lightning/store.db` there, the
 * same default as `lightning serve` run in that folder. Pure, so it is unit-tested.
 */
import path from 'node:path';

/** The store: the setting (relative to the first workspace folder), else `.lightning/store.db` there. */
export function resolveStoreFile(
  setting: string | undefined,
  workspaceFolder: string | undefined,
  home: string,
): string {
  const base = workspaceFolder ?? path.join(home, '.lightning-global');
  if (!setting) return path.join(base, '.lightning', 'store.db');
  const expanded = setting.replace(/^~(?=\/|$)/, home).replace(/\$\{workspaceFolder\}/g, base);
  return path.resolve(base, expanded);
}
