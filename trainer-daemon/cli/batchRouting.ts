/**
 * Where a dataset batch's calls went, recorded as it starts (`<logDir>/batch.json`, 0600), so that `--resume` sends
 * the rest of them to the same place: an omitted `--upstream` or `--token-ids` is taken from the record (and said on
 * stderr), a different one is refused. An upstream with credentials (user:password, a key in its query) is recorded
 * without them, as the store keeps upstreams, and must be given again.
 */
import fs from 'node:fs';
import path from 'node:path';
import { InvalidInputError } from '../protocol/errors';
import { storableUpstream } from '../store/agentKeys';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';
import type { RoutingOptions } from './callRouting';

interface BatchRouting {
  /** `--upstream` as the store would keep it; null without one. */
  readonly upstream: string | null;
  /** Whether `--upstream` had credentials the record left out (then a resume must name it again). */
  readonly upstreamWithheld: boolean;
  readonly tokenIds: boolean;
}

const FILE = 'batch.json';

/** A URL as `new URL` writes it (how storableUpstream writes it, credentials kept). */
function normalized(url: string): string {
  try {
    return new URL(url).toString();
  } catch {
    return url;
  }
}

/** Records the routing flags a new batch was started with. */
export function recordBatchRouting(logDir: string, options: RoutingOptions): void {
  const upstream = options.upstream === undefined ? null : storableUpstream(options.upstream);
  const record: BatchRouting = {
    upstream,
    upstreamWithheld: upstream !== null && upstream !== normalized(options.upstream!),
    tokenIds: options.tokenIds === true,
  };
  fs.writeFileSync(path.join(logDir, FILE), `${JSON.stringify(record)}\n`, { mode: PRIVATE_FILE_MODE });
}

/**
 * The routing flags for resuming `batchId`: the recorded ones where the resume omits them; a different `--upstream`
 * or a `--token-ids` the batch did not have is refused, as its calls would be answered (or recorded) unlike the
 * batch's first ones. A batch with no record (started before it was kept) resumes with the flags given.
 */
export function resumedBatchRouting<T extends RoutingOptions>(
  logDir: string,
  batchId: string,
  options: T,
  say: (line: string) => void,
): T {
  let record: BatchRouting;
  try {
    record = JSON.parse(fs.readFileSync(path.join(logDir, FILE), 'utf8')) as BatchRouting;
  } catch {
    return options;
  }
  const resumed = { ...options };
  if (options.upstream !== undefined) {
    if (storableUpstream(options.upstream) !== record.upstream)
      throw new InvalidInputError(
        record.upstream === null
          ? `--upstream: batch ${batchId} was started without --upstream; resume it without one, or run a new batch`
          : `--upstream: batch ${batchId} was started with --upstream ${record.upstream}; resume it with that one (or without --upstream), or run a new batch`,
      );
  } else if (record.upstream !== null) {
    if (record.upstreamWithheld)
      throw new InvalidInputError(
        `batch ${batchId} was started with --upstream ${record.upstream}, whose credentials were not recorded: resume it with that --upstream again`,
      );
    resumed.upstream = record.upstream;
    say(`lightning: resuming with the batch's --upstream ${record.upstream}`);
  }
  if (options.tokenIds === true && !record.tokenIds)
    throw new InvalidInputError(
      `--token-ids: batch ${batchId} was started without --token-ids; resume it without, or run a new batch`,
    );
  if (options.tokenIds !== true && record.tokenIds) {
    resumed.tokenIds = true;
    say("lightning: resuming with the batch's --token-ids");
  }
  return resumed;
}
