/**
 * Which upstream, token ids and resource pins a debug session's rollout gets: the checkpoint in use
 * (**Lightning: Use Checkpoint**), else what the launch configuration says. Pure, so it is unit-tested.
 */
import {
  checkpointRouting,
  userProviderUpstreams,
  type ProviderUpstreams,
  type ServedPolicy,
} from '../../trainer-daemon/protocol';
import { baseEnvironment, upstreamFor, type LaunchConfig } from './launchConfig';

/** Which upstream, token ids and resource pins a new debug rollout gets. */
export interface RolloutRoute {
  readonly upstream: string | null;
  readonly tokenIds: boolean;
  readonly providerUpstreams?: ProviderUpstreams;
  readonly resources: Readonly<Record<string, number>>;
}

/**
 * A checkpoint in use (served as `served`) answers the session's LLM calls, whatever the launch
 * configuration's own OPENAI_BASE_URL says — choosing it is the explicit choice — with exact token
 * ids, and the rollout records it. Without one, the configuration's OPENAI_BASE_URL stays the
 * upstream (capture never changes which model answers), else the daemon's.
 */
export function debugRoute(
  launch: LaunchConfig,
  processEnv: Readonly<Record<string, string | undefined>>,
  served: ServedPolicy | null,
): RolloutRoute {
  if (served) return checkpointRouting(served);
  return {
    upstream: upstreamFor(launch, processEnv),
    providerUpstreams: userProviderUpstreams(baseEnvironment(launch, processEnv)),
    tokenIds: false,
    resources: {},
  };
}
