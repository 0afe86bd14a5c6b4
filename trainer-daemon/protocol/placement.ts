/**
 * Where a training run's updates and agents run, read from its configuration (GrpoConfig's
 * `distributed` and `ray`), for `lightning train --list` and the panel. Type imports only: the
 * webview bundles this module too.
 */
import { assertNever } from './assert';
import type { GrpoConfig, TrainingRun } from './training';

/** `local`, `torchrun 2 ranks`, `torchrun 2 ranks (FSDP)`, `torchrun 2×4 ranks via 10.0.0.5:29500`, `agents on Ray 10.0.0.5:6379`, joined by `, `. */
export function runPlacement(config: Pick<GrpoConfig, 'distributed' | 'ray'>): string {
  const parts: string[] = [];
  const { distributed, ray } = config;
  if (distributed) {
    const { nprocPerNode, nnodes, rdzvEndpoint, fsdp } = distributed;
    parts.push(`torchrun ${nnodes > 1 ? `${nnodes}×${nprocPerNode}` : nprocPerNode} ranks${fsdp ? ' (FSDP)' : ''}${rdzvEndpoint !== null ? ` via ${rdzvEndpoint}` : ''}`);
  }
  if (ray) parts.push(`agents on Ray ${ray.address}`);
  return parts.length ? parts.join(', ') : 'local';
}

/** Where any run runs: GRPO's placement; APO runs its agents here and updates no weights. */
export function placementOf(run: TrainingRun): string {
  switch (run.algorithm) {
    case 'grpo':
      return runPlacement(run.config);
    case 'apo':
      return 'local';
    default:
      return assertNever(run);
  }
}
