/**
 * Which policy a checkpoint holds, read from its folder: a run with several policies (`--policy`) saves each one's
 * checkpoint of an iteration as `checkpoints/<run>/<iteration>/<policy>` (training/grpoPolicies.ts); a run of one
 * policy as `checkpoints/<run>/<iteration>`. No zod: the pages (webview/) label checkpoints with it.
 */

/** The policy's name, or null for a checkpoint of a run with one policy. */
export function checkpointPolicyName(checkpoint: { readonly path: string; readonly step: number }): string | null {
  const parts = checkpoint.path.split(/[\\/]+/).filter((part) => part !== '');
  const [parent, name] = parts.slice(-2);
  return parent === String(checkpoint.step) && name !== undefined && /^[A-Za-z][A-Za-z0-9_-]{0,39}$/.test(name)
    ? name
    : null;
}

/** How a checkpoint is named to people: `iteration 3`, or `iteration 3 · planner` for a policy's. */
export function checkpointTitle(
  checkpoint: { readonly path: string; readonly step: number },
  word = 'iteration',
): string {
  const policy = checkpointPolicyName(checkpoint);
  return `${word} ${checkpoint.step}${policy === null ? '' : ` · ${policy}`}`;
}
