/**
 * The torchrun training tests' helpers (trainingDistributed, trainingFsdp): a daemon with `tools`, a small GRPO config,
 * ranks.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { GrpoConfig, type GrpoConfigInput, type TrainingRunDetail } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, startDaemon } from './daemon';
import { parentOf } from './processTree';
import { tempDir, waitFor } from './tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'parity-worker.mjs');

/** The pids of the ranks torchrun started (processes running the ddp worker), by LOCAL_RANK. */
export function ranks(daemonPid: number): Map<number, number> {
  const found = new Map<number, number>();
  for (const line of execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' }).split('\n')) {
    if (!line.includes('lightning_trainer.ddp_worker') || line.includes('lightning_trainer.torchrun')) continue;
    const pid = Number(line.trim().split(/\s+/)[0]);
    // Only this test's daemon's ranks: another file's torchrun may be running beside it.
    if (!descendsFrom(pid, daemonPid)) continue;
    try {
      const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const local = env.find((v) => v.startsWith('LOCAL_RANK='));
      if (local) found.set(Number(local.split('=')[1]), pid);
    } catch {
      // It ended meanwhile.
    }
  }
  return found;
}

/** Whether `ancestor` is `pid`'s parent, grandparent, … (read from /proc; false once the chain ends). */
function descendsFrom(pid: number, ancestor: number): boolean {
  for (let current: number | undefined = pid; current !== undefined && current > 1;) {
    current = parentOf(current);
    if (current === ancestor) return true;
  }
  return false;
}

/**
 * A daemon on a fresh store in a temp folder with the `tools` dataset (8 train + 4 val tasks); stopped when the test
 * ends.
 */
export async function daemonWithTools(
  t: TestContext,
): Promise<{ cwd: string; storeFile: string; client: RpcClient; daemonPid: number }> {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(8, 4) });
  return { cwd, storeFile, client, daemonPid: daemon.ready.pid };
}

/**
 * GRPO on a small tiny policy over `tools` (4 samples of 4 tasks an iteration), the parity worker as the agent, on the
 * CPU.
 */
export function distributedConfig(
  cwd: string,
  run: {
    iterations: number;
    python: string;
    distributed: GrpoConfigInput['distributed'];
    lossType?: GrpoConfigInput['lossType'];
  },
): GrpoConfig {
  return GrpoConfig.parse({
    model: { kind: 'tiny', config: { dModel: 48, layers: 2, heads: 4, context: 64 } },
    dataset: 'tools',
    iterations: run.iterations,
    samples: 4,
    tasksPerIteration: 4,
    agentMode: 'worker',
    workers: 1,
    perWorker: 16,
    evalEvery: 10,
    device: 'cpu',
    python: run.python,
    distributed: run.distributed,
    ...(run.lossType ? { lossType: run.lossType } : {}),
    command: { argv: [process.execPath, AGENT], cwd },
  });
}

/** The run's detail once it is no longer running. */
export function runEnded(client: RpcClient, id: string, what: string, timeoutMs: number): Promise<TrainingRunDetail> {
  return waitFor(
    async () => {
      const detail = await client.request('getTrainingRun', { id });
      return detail.run.status === 'running' ? undefined : detail;
    },
    what,
    timeoutMs,
  );
}

/** A free TCP port on loopback. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.once('error', reject);
  });
}
