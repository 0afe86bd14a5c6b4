/**
 * `lightning serve`'s first stdout lines as a starter waits for them (protocol/cliLines.ts): the ready line, or
 * `startup-failed` saying why not. Before either, `store-upgrading` while the daemon upgrades a store an earlier
 * Lightning wrote: from then on the wait is the upgrade's, which takes minutes for a store of millions of spans.
 * Kept apart from supervisor.ts (no `vscode`) so its waits are tested without an editor.
 */
import readline from 'node:readline';
import type { Readable } from 'node:stream';
import type { ReadyMessage } from '../trainer-daemon/protocol';
import { parseCliLine, type StartupFailed, type StoreUpgrading } from '../trainer-daemon/protocol/cliLines';

export type StartOutcome =
  | { readonly kind: 'ready'; readonly ready: ReadyMessage }
  | { readonly kind: 'failed'; readonly failed: StartupFailed }
  /** A first line that is none of serve's (another program on the command line?). */
  | { readonly kind: 'unexpected'; readonly line: string }
  | { readonly kind: 'timeout'; readonly seconds: number; readonly upgrading: boolean }
  /** stdout ended first: the process exited (its exit says why). */
  | { readonly kind: 'closed' };

export interface StartWaits {
  /** How long serve may take to print its first line, and its ready line after that line's upgrade. */
  readonly readyMs: number;
  readonly upgradeMs: number;
  readonly onUpgrading: (upgrade: StoreUpgrading) => void;
}

export function awaitStartLine(stdout: Readable, waits: StartWaits): Promise<StartOutcome> {
  return new Promise<StartOutcome>((resolve) => {
    const lines = readline.createInterface({ input: stdout });
    let upgrading = false;
    let timer: NodeJS.Timeout | undefined;
    const settle = (outcome: StartOutcome): void => {
      clearTimeout(timer);
      // The reader stays on stdout, reading what else the daemon prints, so that a full pipe never blocks it.
      lines.off('line', onLine);
      lines.off('close', onClose);
      resolve(outcome);
    };
    const wait = (ms: number): void => {
      clearTimeout(timer);
      timer = setTimeout(() => settle({ kind: 'timeout', seconds: ms / 1000, upgrading }), ms);
    };
    const onLine = (line: string): void => {
      const parsed = parseCliLine(line);
      if (parsed?.event === 'ready') return settle({ kind: 'ready', ready: parsed });
      if (parsed?.event === 'startup-failed') return settle({ kind: 'failed', failed: parsed });
      if (parsed?.event === 'store-upgrading' && !upgrading) {
        upgrading = true;
        waits.onUpgrading(parsed);
        return wait(waits.upgradeMs);
      }
      settle({ kind: 'unexpected', line });
    };
    const onClose = (): void => settle({ kind: 'closed' });
    lines.on('line', onLine);
    lines.on('close', onClose);
    wait(waits.readyMs);
  });
}
