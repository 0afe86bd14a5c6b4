/**
 * The agents a batch started, recorded as they start (`<logDir>/agents.jsonl`, 0600: pid and a digest
 * of the process's identity), so that `--resume` can stop agents a runner that died left running. A pid is
 * only signalled while it still names the same process — same start time and command line — so a
 * recycled pid never gets killed.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';
import { isProcessAlive } from '../protocol/node/discovery';

interface AgentRecord {
  readonly pid: number;
  readonly identity: string;
}

/**
 * A command line may carry `--api-key=…`: the log keeps only a digest of the identity, which is all a comparison needs.
 */
function digest(identity: string): string {
  return crypto.createHash('sha256').update(identity).digest('hex');
}

/** What tells this process apart from a later one with the same pid (a digest); null when it is gone. */
export function processIdentity(pid: number): string | null {
  try {
    if (fs.existsSync('/proc/self/stat')) {
      // Field 22 (start time, in clock ticks since boot) follows the parenthesized command name.
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const startTime = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
      return digest(`${startTime} ${fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim()}`);
    }
    const listed = execFileSync('ps', ['-o', 'lstart=,command=', '-p', String(pid)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    return listed ? digest(listed) : null;
  } catch {
    return null;
  }
}

export class AgentPidLog {
  constructor(private readonly file: string) {}

  /** Records an agent just started (its process group leader). */
  record(pid: number): void {
    const identity = processIdentity(pid);
    // An agent already gone needs no stopping later.
    if (identity !== null)
      fs.appendFileSync(this.file, `${JSON.stringify({ pid, identity } satisfies AgentRecord)}\n`, {
        mode: PRIVATE_FILE_MODE,
      });
  }

  /**
   * Stops the recorded agents that still run as the same process, with their process groups
   * (SIGTERM, then SIGKILL after `graceMs`); resolves with how many there were, once they are gone.
   */
  async stopSurvivors(graceMs = 2_000): Promise<number> {
    if (!fs.existsSync(this.file)) return 0;
    const records = fs
      .readFileSync(this.file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .flatMap((line): AgentRecord[] => {
        try {
          return [JSON.parse(line) as AgentRecord];
        } catch {
          return [];
        }
      });
    const survivors = records.filter(
      (record) => isProcessAlive(record.pid) && processIdentity(record.pid) === record.identity,
    );
    const signal = (sig: NodeJS.Signals): void => {
      for (const { pid } of survivors.filter((s) => processIdentity(s.pid) === s.identity)) {
        try {
          process.kill(-pid, sig);
        } catch {
          // Gone meanwhile.
        }
      }
    };
    signal('SIGTERM');
    const deadline = Date.now() + graceMs;
    while (survivors.some((s) => processIdentity(s.pid) === s.identity) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    signal('SIGKILL');
    return survivors.length;
  }
}

/** `<logDir>/runner.json`: the process running a batch now (pid and a digest of its identity), for `--resume`. */
const RUNNER_FILE = 'runner.json';

/** Records this process as the batch's runner (it runs the batch whose log folder is `logDir`). */
export function recordRunner(logDir: string): void {
  const identity = processIdentity(process.pid);
  if (identity === null) return;
  fs.writeFileSync(
    `${logDir}/${RUNNER_FILE}`,
    `${JSON.stringify({ pid: process.pid, identity } satisfies AgentRecord)}\n`,
    { mode: PRIVATE_FILE_MODE },
  );
}

/**
 * The pid of the process still running the batch whose log folder is `logDir` (the same process that recorded itself:
 * same start time and command line), or null: none recorded, it exited, or its pid now names another process.
 */
export function liveRunner(logDir: string): number | null {
  let record: AgentRecord;
  try {
    record = JSON.parse(fs.readFileSync(`${logDir}/${RUNNER_FILE}`, 'utf8')) as AgentRecord;
  } catch {
    return null;
  }
  if (record.pid === process.pid || !isProcessAlive(record.pid)) return null;
  return processIdentity(record.pid) === record.identity ? record.pid : null;
}
