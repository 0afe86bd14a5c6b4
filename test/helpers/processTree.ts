/**
 * Processes by their parents, read from /proc (Linux, where the tests run): the children a test's process started,
 * however they grouped themselves.
 */
import fs from 'node:fs';

/** A process as /proc/PID/stat names it: its state, its parent and its start time (clock ticks since boot). */
interface ProcessStat {
  readonly state: string;
  readonly parent: number;
  readonly started: string;
}

function stat(pid: number): ProcessStat | undefined {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // `pid (comm) state ppid … starttime …`: comm may hold spaces and parentheses, so read after the last ')'. The
  // fields after it start at the third (state); starttime is the 22nd.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0]!, parent: Number(fields[1]), started: fields[19]! };
}

/** `pid`'s parent, or undefined once it has ended (or where there is no /proc). */
export function parentOf(pid: number): number | undefined {
  return stat(pid)?.parent;
}

/** A process found among another's descendants: its pid, and its start time to tell it from a later one. */
export interface Descendant {
  readonly pid: number;
  readonly started: string;
}

/** Every process below `root` (children, their children, …), whatever their process groups; [] without /proc. */
export function descendants(root: number): Descendant[] {
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const children = new Map<number, Descendant[]>();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const found = stat(Number(entry));
    if (!found) continue;
    const list = children.get(found.parent) ?? [];
    list.push({ pid: Number(entry), started: found.started });
    children.set(found.parent, list);
  }
  const below: Descendant[] = [];
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      below.push(child);
      walk(child.pid);
    }
  };
  walk(root);
  return below;
}

/** Sends `signal` to each process still running as it was found (not a later process given its pid). */
export function signalEach(processes: readonly Descendant[], signal: NodeJS.Signals): void {
  for (const found of processes) {
    if (!stillRunning(found)) continue;
    const { pid } = found;
    try {
      process.kill(pid, signal);
    } catch {
      // It ended just now.
    }
  }
}

/** Whether a process found earlier still runs: not ended, not a zombie left for its parent to reap, not a new one. */
export function stillRunning({ pid, started }: Descendant): boolean {
  const now = stat(pid);
  return now !== undefined && now.started === started && now.state !== 'Z' && now.state !== 'X';
}
