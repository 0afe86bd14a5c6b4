/**
 * The trainer worker under torchrun (`lightning train --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT]`):
 * the command line that starts it (python/lightning_trainer/ddp_worker.py, rank 0 speaks the worker protocol), and
 * the sentence that names the rank and host when torchrun reports a failed rank.
 */
import net from 'node:net';
import type { GrpoConfig } from '../protocol';

/** What starts the ranks (FSDP is the `load` request's, not torchrun's). */
export type DistributedSpec = Pick<NonNullable<GrpoConfig['distributed']>, 'nprocPerNode' | 'nnodes' | 'rdzvEndpoint'>;

/**
 * Arguments after the Python executable:
 * `-m lightning_trainer.torchrun …torchrun flags… -m lightning_trainer.ddp_worker`. One machine: a static rendezvous on
 * loopback at `localPort`, a free port the caller picked (`--standalone` binds the fixed port 29400 in torch 1.x, so
 * two runs on one machine, or a run beside another torchrun job, collided).
 */
export function torchrunArgs(spec: DistributedSpec, localPort: number): string[] {
  const args = ['-m', 'lightning_trainer.torchrun', '--nproc_per_node', String(spec.nprocPerNode)];
  if (spec.rdzvEndpoint === null)
    args.push('--nnodes', '1', '--node_rank', '0', '--master_addr', '127.0.0.1', '--master_port', String(localPort));
  else {
    // Static rendezvous with this machine as node 0, so that global rank 0 (the protocol) runs here.
    const { host, port } = splitEndpoint(spec.rdzvEndpoint);
    args.push('--nnodes', String(spec.nnodes), '--node_rank', '0', '--master_addr', host, '--master_port', port);
  }
  return [...args, '-m', 'lightning_trainer.ddp_worker'];
}

/** A loopback port free right now, for a one-machine rendezvous. */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** What to run on each other machine (node rank I = 1 … M−1), for the CLI and the README. */
export function otherNodeCommand(spec: DistributedSpec, python = 'python3'): string | null {
  if (spec.rdzvEndpoint === null || spec.nnodes < 2) return null;
  const { host, port } = splitEndpoint(spec.rdzvEndpoint);
  return `PYTHONPATH=<checkout>/trainer-daemon/python ${python} -m lightning_trainer.torchrun --nproc_per_node ${spec.nprocPerNode} --nnodes ${spec.nnodes} --node_rank I --master_addr ${host} --master_port ${port} -m lightning_trainer.ddp_worker`;
}

export function splitEndpoint(endpoint: string): { host: string; port: string } {
  const at = endpoint.lastIndexOf(':');
  return { host: endpoint.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: endpoint.slice(at + 1) };
}

/**
 * torchrun's failure summary (`host : vm / rank : 1 (local_rank: 1) / exitcode : -9`) as one sentence per failed
 * rank, e.g. `rank 1 (local rank 1) on host gpu-3 exited with code -9 (signal 9)`; null when there is none.
 */
export function torchrunFailures(stderr: string): string | null {
  const failures = [
    ...stderr.matchAll(/host\s*: (\S+)\s*\n\s*rank\s*: (\d+) \(local_rank: (\d+)\)\s*\n\s*exitcode\s*: (-?\d+)/g),
  ];
  if (failures.length === 0) return null;
  const seen = new Set<string>();
  const lines = failures.flatMap(([, host, rank, local, code]) => {
    const key = `${rank}`;
    if (seen.has(key)) return [];
    seen.add(key);
    const n = Number(code);
    return [
      `rank ${rank} (local rank ${local}) on host ${host} ${n < 0 ? `was killed by signal ${-n}` : `exited with code ${n}`}`,
    ];
  });
  return lines.join('; ');
}
