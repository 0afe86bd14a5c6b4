/**
 * Where the rollouts of `lightning run` and `lightning dataset run` send their LLM calls: with
 * `--checkpoint ID`, to that checkpoint, served by the daemon (`policy/serve`) with exact token ids,
 * each rollout recording it as its `policy` resource; otherwise to the agent's own OPENAI_BASE_URL,
 * else `--upstream`, else the daemon's upstream.
 */
import { Option, type Command } from 'commander';
import { checkpointRouting, PolicyDevice, userUpstream } from '../protocol';
import { InvalidInputError } from '../errors';
import type { RpcClient } from '../rpc/client';
import { parseUpstream } from './commands/serve';

export interface RoutingOptions {
  upstream?: string;
  tokenIds?: boolean;
  checkpoint?: string;
  device?: PolicyDevice;
}

export interface Routing {
  readonly upstream: string | null;
  readonly tokenIds: boolean;
  /** Resource versions the rollouts are pinned to (the checkpoint's `policy` version). */
  readonly resources: Readonly<Record<string, number>>;
}

/** Adds `--checkpoint` and `--device` to a command that runs agents. */
export function addCheckpointOptions(command: Command): Command {
  return command
    .option('--checkpoint <id>', 'send the LLM calls to this checkpoint (ckpt-…, see `lightning checkpoints`), served by the daemon with exact token ids and recorded on each rollout (implies --token-ids); overrides OPENAI_BASE_URL')
    .addOption(new Option('--device <device>', 'with --checkpoint: where the policy runs (default: as its training run did)').choices(PolicyDevice.options));
}

/** Checks the flags, then (with `--checkpoint`) has the daemon serve the checkpoint — loading it takes a moment the first time. */
export async function resolveRouting(client: RpcClient, options: RoutingOptions, env: NodeJS.ProcessEnv): Promise<Routing> {
  if (options.checkpoint === undefined) {
    if (options.device !== undefined) throw new InvalidInputError('--device: applies with --checkpoint only');
    const own = userUpstream(env);
    const upstream = own !== null ? parseUpstream(own, 'OPENAI_BASE_URL') : options.upstream ? parseUpstream(options.upstream) : null;
    return { upstream, tokenIds: options.tokenIds ?? false, resources: {} };
  }
  if (options.upstream !== undefined) throw new InvalidInputError('--upstream: give either --upstream or --checkpoint (the checkpoint is the upstream)');
  process.stderr.write(`lightning: serving checkpoint ${options.checkpoint}…\n`);
  const served = await client.request('servePolicy', { checkpointId: options.checkpoint, ...(options.device ? { device: options.device } : {}) });
  process.stderr.write(`lightning: checkpoint ${served.checkpointId} (run ${served.runId}, step ${served.step}) serves at ${served.url} on ${served.device}\n`);
  return checkpointRouting(served);
}
