/**
 * Stopping agent process groups: every agent runs in its own group (spawned detached), so that a
 * timeout or a cancel stops the agent's own children too, and the terminal's signals do not reach
 * it unrelayed.
 */
import type { ChildProcess } from 'node:child_process';

/** Signals a whole process group (the agent and whatever it started), even after the agent itself exited. */
export function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // The group is gone.
  }
}

/** SIGTERM now, SIGKILL after the grace period: how every agent process group is stopped. */
export function stopGroup(child: ChildProcess, graceMs = 2_000): void {
  killGroup(child, 'SIGTERM');
  setTimeout(() => killGroup(child, 'SIGKILL'), graceMs).unref();
}
