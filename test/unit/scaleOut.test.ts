/**
 * Scale-out's pure parts: where a run runs (CLI and panel), torchrun's command line and failure summary, the named
 * Host.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GrpoConfig, placementDetail, runPlacement, type RunPlacement } from '../../trainer-daemon/protocol';
import { isLoopbackHost } from '../../trainer-daemon/server/http';
import {
  freeLoopbackPort,
  otherNodeCommand,
  torchrunArgs,
  torchrunFailures,
} from '../../trainer-daemon/training/torchrun';
import { grpoConfigFromFlags } from '../../trainer-daemon/cli/commands/trainGrpo';
import { runSubject } from '../../trainer-daemon/protocol/ui/trainingRunFormat';

const base = { model: { kind: 'tiny' }, dataset: 'd', command: { argv: ['node', 'a.js'], cwd: '/w' } } as const;

describe('scale-out', () => {
  it('says where a run updates and where its agents run, from its configuration', () => {
    assert.equal(runPlacement(GrpoConfig.parse(base)), 'local');
    assert.equal(runPlacement(GrpoConfig.parse({ ...base, distributed: { nprocPerNode: 2 } })), 'torchrun 2 ranks');
    const both = GrpoConfig.parse({
      ...base,
      distributed: { nprocPerNode: 4, nnodes: 2, rdzvEndpoint: '10.0.0.5:29500' },
      ray: { address: '10.0.0.7:6379' },
    });
    assert.equal(runPlacement(both), 'torchrun 2×4 ranks via 10.0.0.5:29500, agents on Ray 10.0.0.7:6379');
    const run = {
      id: 'r',
      algorithm: 'grpo' as const,
      config: both,
      status: 'running' as const,
      createdAt: 1,
      startedAt: 1,
      endedAt: null,
      error: null,
      errorKind: null,
      cancelRequested: false,
      result: null,
    };
    assert.equal(runSubject(run), 'tiny · d · torchrun 2×4 ranks via 10.0.0.5:29500, agents on Ray 10.0.0.7:6379');
  });

  it("says where a run's agents and ranks really ran once it recorded them: the Ray nodes and the ranks' hosts", () => {
    const both = GrpoConfig.parse({ ...base, distributed: { nprocPerNode: 2 }, ray: { address: '10.0.0.7:6379' } });
    const node = (ip: string, host: string, attempts: number): RunPlacement['rayNodes'][number] => ({
      nodeId: `id-${ip}`,
      ip,
      host,
      attempts,
    });
    const placement: RunPlacement = {
      rayNodes: [node('10.0.0.5', 'gpu-1', 12), node('10.0.0.6', 'gpu-2', 1)],
      ranks: [
        { rank: 0, localRank: 0, host: 'host-a' },
        { rank: 1, localRank: 1, host: 'host-a' },
      ],
    };
    assert.equal(
      runPlacement(both, placement),
      'torchrun 2 ranks on host-a, agents on 2 Ray nodes (10.0.0.5, 10.0.0.6)',
    );
    // Nothing recorded yet (a run that has not started its agents): the configuration, as before.
    assert.equal(runPlacement(both, { rayNodes: [], ranks: [] }), 'torchrun 2 ranks, agents on Ray 10.0.0.7:6379');
    const many = {
      rayNodes: ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'].map((ip) => node(ip, 'h', 1)),
      ranks: [
        { rank: 0, localRank: 0, host: 'a' },
        { rank: 1, localRank: 0, host: 'b' },
      ],
    };
    assert.equal(
      runPlacement(both, many),
      'torchrun 2 ranks on a, b, agents on 4 Ray nodes (10.0.0.1, 10.0.0.2, 10.0.0.3, …)',
    );
    const run = {
      id: 'r',
      algorithm: 'grpo' as const,
      config: both,
      status: 'running' as const,
      createdAt: 1,
      startedAt: 1,
      endedAt: null,
      error: null,
      errorKind: null,
      cancelRequested: false,
      result: null,
      placement,
    };
    assert.equal(runSubject(run), 'tiny · d · torchrun 2 ranks on host-a, agents on 2 Ray nodes (10.0.0.5, 10.0.0.6)');
    assert.deepEqual(placementDetail(run), [
      'Ray nodes: 10.0.0.5 (gpu-1) 12 attempts · 10.0.0.6 (gpu-2) 1 attempt',
      'Ranks: 0 on host-a (local 0) · 1 on host-a (local 1)',
    ]);
    assert.deepEqual(placementDetail({ ...run, placement: undefined }), []);
  });

  it('shards with --fsdp under --nproc-per-node only, and says so where the run is listed', () => {
    const flags = { algorithm: 'grpo' as const, model: 'tiny', dataset: 'd', store: '/w/.lightning/store.db' };
    assert.throws(
      () => grpoConfigFromFlags({ ...flags, fsdp: true }, ['node', 'a.js'], '/w'),
      /--fsdp shards the policy across torchrun ranks: it goes with --nproc-per-node N/,
    );
    const sharded = grpoConfigFromFlags({ ...flags, fsdp: true, nprocPerNode: '2' }, ['node', 'a.js'], '/w');
    assert.deepEqual(sharded.distributed, { nprocPerNode: 2, nnodes: 1, rdzvEndpoint: null, fsdp: true });
    assert.equal(runPlacement(sharded), 'torchrun 2 ranks (FSDP)');
    assert.equal(grpoConfigFromFlags({ ...flags, nprocPerNode: '2' }, ['node', 'a.js'], '/w').distributed?.fsdp, false);
  });

  it('refuses several machines without an endpoint, and a malformed endpoint, naming the field', () => {
    const many = GrpoConfig.safeParse({ ...base, distributed: { nprocPerNode: 2, nnodes: 2 } });
    assert.ok(!many.success && /nnodes > 1 needs rdzvEndpoint/.test(many.error.message));
    const bad = GrpoConfig.safeParse({ ...base, distributed: { nprocPerNode: 2, rdzvEndpoint: 'nowhere' } });
    assert.ok(!bad.success && /rdzvEndpoint must be HOST:PORT/.test(bad.error.message));
  });

  it('starts rank 0 here: a rendezvous on a free loopback port on one machine, as node 0 across machines', async () => {
    assert.deepEqual(torchrunArgs({ nprocPerNode: 2, nnodes: 1, rdzvEndpoint: null }, 41234), [
      '-m',
      'lightning_trainer.torchrun',
      '--nproc_per_node',
      '2',
      '--nnodes',
      '1',
      '--node_rank',
      '0',
      '--master_addr',
      '127.0.0.1',
      '--master_port',
      '41234',
      '-m',
      'lightning_trainer.ddp_worker',
    ]);
    // Never torch 1.x's fixed standalone port: two runs on one machine each get their own.
    const [a, b] = await Promise.all([freeLoopbackPort(), freeLoopbackPort()]);
    assert.ok(a > 0 && b > 0 && a !== 29400 && b !== 29400);
    const multi = { nprocPerNode: 4, nnodes: 3, rdzvEndpoint: '[fd00::5]:29500' };
    assert.deepEqual(torchrunArgs(multi, 41234).slice(4, 12), [
      '--nnodes',
      '3',
      '--node_rank',
      '0',
      '--master_addr',
      'fd00::5',
      '--master_port',
      '29500',
    ]);
    assert.match(
      otherNodeCommand(multi)!,
      /--nnodes 3 --node_rank I --master_addr fd00::5 --master_port 29500 -m lightning_trainer\.ddp_worker$/,
    );
    assert.equal(otherNodeCommand({ nprocPerNode: 2, nnodes: 1, rdzvEndpoint: null }), null);
  });

  it("reads torchrun's failure summary: each failed rank once, with its host and how it ended", () => {
    const summary = `Failures:\n[1]:\n  time      : t\n  host      : gpu-3\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 12)\nRoot Cause (first observed failure):\n[0]:\n  time      : t\n  host      : gpu-1\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 11)\n`;
    assert.equal(
      torchrunFailures(summary),
      'rank 1 (local rank 1) on host gpu-3 was killed by signal 9; rank 0 (local rank 0) on host gpu-1 exited with code 1',
    );
    assert.equal(torchrunFailures('Traceback: nothing torchrun'), null);
  });

  it("accepts a Host naming loopback or the agents' address with its own port, nothing else", () => {
    const agents = { host: '10.0.0.5', port: 4100 };
    assert.ok(isLoopbackHost('127.0.0.1:4000', 4000, agents));
    assert.ok(isLoopbackHost('10.0.0.5:4100', 4000, agents));
    assert.ok(!isLoopbackHost('10.0.0.5:4000', 4000, agents), "the agents' address on the RPC port");
    assert.ok(!isLoopbackHost('evil.example:4100', 4000, agents));
    assert.ok(!isLoopbackHost('10.0.0.5:4100', 4000), "without an agents' listener");
    assert.ok(isLoopbackHost('[fd00::5]:4100', 4000, { host: 'fd00::5', port: 4100 }));
  });
});
