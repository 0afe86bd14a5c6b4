/**
 * Where a dataset batch's calls went, recorded as it starts (`<logDir>/batch.json`, 0600), so that `--resume` sends
 * the rest of them to the same place. The record is the routing resolved (the agent's OPENAI_BASE_URL, else
 * `--upstream`, else the daemon's upstream; token ids or not). A resume takes an omitted `--upstream` or `--token-ids`
 * from it (said on stderr) and is refused when the rest would go elsewhere. An upstream with credentials
 * (user:password, a key in its query) is recorded without them, as the store keeps upstreams, and must be given again.
 * A batch served by a checkpoint resumes on that checkpoint (callRouting.ts#resumeRoutingOptions), not on this record.
 */
import fs from 'node:fs';
import path from 'node:path';
import { userUpstream } from '../protocol/agentEnv';
import { InvalidInputError } from '../protocol/errors';
import { storableUpstream } from '../store/agentKeys';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';
import type { Routing, RoutingOptions } from './callRouting';

interface BatchRouting {
  /** Served by a checkpoint: the checkpoint is its routing. */
  readonly checkpoint: boolean;
  /** Where its OpenAI-shaped calls went, as the store would keep the URL; null: the daemon's upstream. */
  readonly upstream: string | null;
  /** Whether that upstream had credentials the record left out (then a resume must name it again). */
  readonly upstreamWithheld: boolean;
  readonly tokenIds: boolean;
}

const FILE = 'batch.json';

/** An upstream as compared: as the store keeps it, without a trailing slash (the proxy strips it too). */
function comparable(url: string): string {
  return storableUpstream(url).replace(/\/+$/, '');
}

/** An upstream as `new URL` writes it, credentials kept, without a trailing slash. */
function normalized(url: string): string {
  try {
    return new URL(url).toString().replace(/\/+$/, '');
  } catch {
    return url.replace(/\/+$/, '');
  }
}

/** Records where a new batch's calls go. */
export function recordBatchRouting(logDir: string, options: RoutingOptions, routing: Routing): void {
  const upstream = routing.upstream === null ? null : comparable(routing.upstream);
  const record: BatchRouting = {
    checkpoint: options.checkpoint !== undefined,
    upstream,
    upstreamWithheld: upstream !== null && upstream !== normalized(routing.upstream!),
    tokenIds: routing.tokenIds,
  };
  fs.writeFileSync(path.join(logDir, FILE), `${JSON.stringify(record)}\n`, { mode: PRIVATE_FILE_MODE });
}

/** The batch's record; undefined when there is none (a batch started before it was kept) or it is unreadable. */
function readRecord(logDir: string, say: (line: string) => void): BatchRouting | undefined {
  const file = path.join(logDir, FILE);
  if (!fs.existsSync(file)) return undefined;
  try {
    const record = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<BatchRouting>;
    if (
      typeof record.checkpoint === 'boolean' &&
      (record.upstream === null || typeof record.upstream === 'string') &&
      typeof record.upstreamWithheld === 'boolean' &&
      typeof record.tokenIds === 'boolean'
    )
      return record as BatchRouting;
  } catch {
    // Said below.
  }
  say(`lightning: ${file} is not a batch routing record; resuming with the flags given`);
  return undefined;
}

/**
 * The routing flags for resuming `batchId`, before they are resolved: an omitted `--upstream` or `--token-ids` is the
 * batch's (checkResumedRouting then refuses a resume whose calls would go elsewhere).
 */
export function resumedBatchRouting<T extends RoutingOptions>(
  logDir: string,
  batchId: string,
  options: T,
  env: NodeJS.ProcessEnv,
  say: (line: string) => void,
): T {
  const record = readRecord(logDir, say);
  if (!record || record.checkpoint) return options;
  const resumed = { ...options };
  if (options.upstream === undefined && record.upstream !== null && userUpstream(env) === null) {
    if (record.upstreamWithheld)
      throw new InvalidInputError(
        `batch ${batchId} was started with --upstream ${record.upstream}, whose credentials were not recorded: resume it with that --upstream again`,
      );
    resumed.upstream = record.upstream;
    say(`lightning: resuming with the batch's upstream ${record.upstream}`);
  }
  if (options.tokenIds !== true && record.tokenIds) {
    resumed.tokenIds = true;
    say("lightning: resuming with the batch's --token-ids");
  }
  return resumed;
}

/** Refuses a resume of `batchId` whose calls would go elsewhere than its first ones, or with token ids it lacked. */
export function checkResumedRouting(logDir: string, batchId: string, routing: Routing, env: NodeJS.ProcessEnv): void {
  const record = readRecord(logDir, () => undefined);
  if (!record || record.checkpoint) return;
  const now = routing.upstream === null ? null : comparable(routing.upstream);
  if (now !== record.upstream) {
    const where = (url: string | null): string => url ?? "the daemon's upstream";
    throw new InvalidInputError(
      `batch ${batchId}'s calls went to ${where(record.upstream)}; this resume would send the rest to ${where(now)}${userUpstream(env) === null ? '' : ' (OPENAI_BASE_URL)'}: resume it ${record.upstream === null ? 'without --upstream' : `with --upstream ${record.upstream}`} and without OPENAI_BASE_URL or OPENAI_API_BASE, or run a new batch`,
    );
  }
  if (routing.tokenIds && !record.tokenIds)
    throw new InvalidInputError(
      `--token-ids: batch ${batchId} was started without --token-ids; resume it without, or run a new batch`,
    );
}
