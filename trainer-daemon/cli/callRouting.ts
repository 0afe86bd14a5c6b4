/**
 * Where the rollouts of `lightning run` and `lightning dataset run` send their LLM calls: with
 * `--checkpoint ID`, to that checkpoint, served by the daemon (`policy/serve`) with exact token ids,
 * each rollout recording it as its `policy` resource; otherwise to the agent's own OPENAI_BASE_URL,
 * else `--upstream`, else the daemon's upstream. A resumed batch keeps the checkpoint it was started
 * with: its rollouts stay pinned to that checkpoint, so their calls go there too.
 */
import { Option, type Command } from 'commander';
import {
  checkpointRouting,
  PolicyDevice,
  providerBaseVariables,
  userProviderUpstreams,
  userUpstream,
  type ProviderName,
  type ProviderUpstreams,
} from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import type { RpcClient } from '../protocol/node/connection';
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
  /** The agent's own ANTHROPIC_BASE_URL / GOOGLE_GEMINI_BASE_URL (a checkpoint answers those calls itself). */
  readonly providerUpstreams?: ProviderUpstreams;
  /** Resource versions the rollouts are pinned to (the checkpoint's `policy` version). */
  readonly resources: Readonly<Record<string, number>>;
}

/** Adds `--checkpoint` and `--device` to a command that runs agents. */
export function addCheckpointOptions(command: Command): Command {
  return command
    .option(
      '--checkpoint <id>',
      'send the LLM calls to this checkpoint (ckpt-…, see `lightning checkpoints`), served by the daemon with exact token ids and recorded on each rollout (implies --token-ids); overrides OPENAI_BASE_URL',
    )
    .addOption(
      new Option(
        '--device <device>',
        'with --checkpoint: where the policy runs (default: as its training run did)',
      ).choices(PolicyDevice.options),
    );
}

/**
 * Checks the flags, then (with `--checkpoint`) has the daemon serve the checkpoint — loading it takes a moment the
 * first time.
 */
export async function resolveRouting(
  client: RpcClient,
  options: RoutingOptions,
  env: NodeJS.ProcessEnv,
): Promise<Routing> {
  if (options.checkpoint === undefined) {
    if (options.device !== undefined) throw new InvalidInputError('--device: applies with --checkpoint only');
    const own = userUpstream(env);
    const upstream =
      own !== null ? parseUpstream(own, 'OPENAI_BASE_URL') : options.upstream ? parseUpstream(options.upstream) : null;
    const providerUpstreams = Object.fromEntries(
      Object.entries(userProviderUpstreams(env)).map(([name, url]) => [
        name,
        parseUpstream(
          url,
          providerBaseVariables(name as ProviderName).find((variable) => env[variable]),
        ),
      ]),
    );
    return { upstream, tokenIds: options.tokenIds ?? false, providerUpstreams, resources: {} };
  }
  if (options.upstream !== undefined)
    throw new InvalidInputError('--upstream: give either --upstream or --checkpoint (the checkpoint is the upstream)');
  process.stderr.write(`lightning: serving checkpoint ${options.checkpoint}…\n`);
  const served = await client.request('servePolicy', {
    checkpointId: options.checkpoint,
    ...(options.device ? { device: options.device } : {}),
  });
  process.stderr.write(
    `lightning: checkpoint ${served.checkpointId} (run ${served.runId}, step ${served.step}) serves at ${served.url} on ${served.device}\n`,
  );
  return checkpointRouting(served);
}

/**
 * The routing options for resuming `batchId`, whose rollouts are pinned to checkpoint `pinned`
 * (null: to none): the batch's checkpoint serves them again; another one (or one for a batch that
 * had none) is refused, as it would answer calls recorded as the batch's checkpoint's.
 */
export function resumeRoutingOptions<T extends RoutingOptions>(options: T, batchId: string, pinned: string | null): T {
  if (options.checkpoint !== undefined && options.checkpoint !== pinned) {
    throw new InvalidInputError(
      pinned
        ? `--checkpoint ${options.checkpoint}: batch ${batchId} was started with checkpoint ${pinned}, which its rollouts record; resume it without --checkpoint (it is served again) or run a new batch with ${options.checkpoint}`
        : `--checkpoint ${options.checkpoint}: batch ${batchId} was started without a checkpoint; resume it without --checkpoint, or run a new batch with ${options.checkpoint}`,
    );
  }
  if (pinned === null) return options;
  if (options.upstream !== undefined)
    throw new InvalidInputError(
      `--upstream: batch ${batchId} was started with checkpoint ${pinned}, which answers its rollouts; resume it without --upstream`,
    );
  return { ...options, checkpoint: pinned };
}
