/**
 * Where a training run's updates and agents run, for `lightning train --list` and the panel: what the
 * run recorded as it ran (its `placement`: the Ray nodes of its attempts, the torchrun ranks that
 * joined), else what its configuration asks for (GrpoConfig's `distributed` and `ray`). Type imports
 * only: the webview bundles this module too.
 */
import { assertNever } from './assert';
import type { RunPlacement } from './records';
import type { GrpoConfig, TrainingRun } from './training';

/** How many Ray node addresses a one-line placement names before it elides the rest. */
const NODES_NAMED = 3;

/**
 * One line, parts joined by `, `: `local`; from the configuration `torchrun 2 ranks`, `torchrun 2 ranks (FSDP)`,
 * `torchrun 2×4 ranks via 10.0.0.5:29500`, `agents on Ray 10.0.0.5:6379`; once recorded, `torchrun 2 ranks on host-a`,
 * `agents on 2 Ray nodes (10.0.0.5, 10.0.0.6)`.
 */
export function runPlacement(config: Pick<GrpoConfig, 'distributed' | 'ray'>, placement?: RunPlacement): string {
  const parts: string[] = [];
  const { distributed, ray } = config;
  if (distributed) {
    const { nprocPerNode, nnodes, rdzvEndpoint, fsdp } = distributed;
    const ranks = placement?.ranks ?? [];
    const sharded = fsdp ? ' (FSDP)' : '';
    if (ranks.length > 0)
      parts.push(
        `torchrun ${ranks.length} rank${ranks.length === 1 ? '' : 's'}${sharded} on ${distinct(ranks.map((r) => r.host)).join(', ')}`,
      );
    else
      parts.push(
        `torchrun ${nnodes > 1 ? `${nnodes}×${nprocPerNode}` : nprocPerNode} ranks${sharded}${rdzvEndpoint !== null ? ` via ${rdzvEndpoint}` : ''}`,
      );
  }
  if (ray) {
    const nodes = placement?.rayNodes ?? [];
    if (nodes.length > 0) {
      const named =
        nodes
          .slice(0, NODES_NAMED)
          .map((n) => n.ip)
          .join(', ') + (nodes.length > NODES_NAMED ? ', …' : '');
      parts.push(`agents on ${nodes.length} Ray node${nodes.length === 1 ? '' : 's'} (${named})`);
    } else parts.push(`agents on Ray ${ray.address}`);
  }
  return parts.length ? parts.join(', ') : 'local';
}

/**
 * Where any run runs: GRPO's placement; APO runs its agents here and updates no weights; SFT trains in one process
 * here.
 */
export function placementOf(run: TrainingRun): string {
  switch (run.algorithm) {
    case 'grpo':
      return runPlacement(run.config, run.placement);
    case 'apo':
    case 'sft':
      return 'local';
    default:
      return assertNever(run);
  }
}

/**
 * A run's detail, one line per kind (none before anything was recorded):
 * `Ray nodes: 10.0.0.5 (gpu-1) 12 attempts · 10.0.0.6 (gpu-2) 4 attempts`,
 * `Ranks: 0 on host-a (local 0) · 1 on host-a (local 1)`.
 */
export function placementDetail(run: TrainingRun): string[] {
  const placement = run.placement;
  if (!placement) return [];
  const lines: string[] = [];
  if (placement.rayNodes.length > 0) {
    lines.push(
      `Ray nodes: ${placement.rayNodes.map((n) => `${n.ip} (${n.host}) ${n.attempts} attempt${n.attempts === 1 ? '' : 's'}`).join(' · ')}`,
    );
  }
  if (placement.ranks.length > 0)
    lines.push(`Ranks: ${placement.ranks.map((r) => `${r.rank} on ${r.host} (local ${r.localRank})`).join(' · ')}`);
  return lines;
}

function distinct(values: readonly string[]): string[] {
  return [...new Set(values)];
}
