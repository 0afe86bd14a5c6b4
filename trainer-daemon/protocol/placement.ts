/**
 * Where a training run's updates and agents run, read from its stored configuration (GrpoConfig's
 * `distributed` and `ray`), for `lightning train --list` and the panel. Plain field reads, no schema:
 * the webview bundles this module too.
 */
type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const field = (value: Json | undefined, key: string): Json | undefined => (value !== null && typeof value === 'object' && !Array.isArray(value) ? value[key] : undefined);

/** `local`, `torchrun 2 ranks`, `torchrun 2×4 ranks via 10.0.0.5:29500`, `agents on Ray 10.0.0.5:6379`, joined by `, `. */
export function runPlacement(config: Json): string {
  const parts: string[] = [];
  const distributed = field(config, 'distributed');
  const perNode = field(distributed, 'nprocPerNode');
  if (typeof perNode === 'number') {
    const nodes = field(distributed, 'nnodes');
    const endpoint = field(distributed, 'rdzvEndpoint');
    parts.push(`torchrun ${typeof nodes === 'number' && nodes > 1 ? `${nodes}×${perNode}` : perNode} ranks${typeof endpoint === 'string' ? ` via ${endpoint}` : ''}`);
  }
  const address = field(field(config, 'ray'), 'address');
  if (typeof address === 'string') parts.push(`agents on Ray ${address}`);
  return parts.length ? parts.join(', ') : 'local';
}
