import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A fresh temporary folder, removed when the test ends. */
export function tempDir(t: { after(fn: () => void): void }, prefix = 'lightning-test-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Polls `check` until it returns a truthy value or the deadline passes (no bare sleeps in tests). */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  what: string,
  timeoutMs = 5_000,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
