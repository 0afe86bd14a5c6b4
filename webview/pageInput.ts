/**
 * What a page (the side panel, an editor tab) reads without zod, which its bundle does not ship: the
 * extension's messages and the panel's own saved filters. The messages come from our own extension, which
 * read every record from the daemon through the protocol's schemas (RpcClient checks each result) before
 * posting it, so a page only checks that it got a message; the extension validates what a page sends it
 * (protocol/ui/panelMessages.ts, protocol/ui/editorMessages.ts). The filter is also what the page sends, so it
 * keeps to the schema's rules (RolloutFilter in protocol/ui/panelMessages.ts) rather than have the extension
 * refuse it.
 */
import { FILTER_TEXT_MAX, ROLLOUT_MODES, ROLLOUT_STATUSES } from '../trainer-daemon/protocol/rolloutValues';
import type { RolloutMode, RolloutStatus } from '../trainer-daemon/protocol/records';
import type { RolloutFilter } from '../trainer-daemon/protocol/ui/panelMessages';

/** A message posted to the page: an object with a `type` (a page ignores the types it does not know). */
export function extensionMessage<T extends { readonly type: string }>(data: unknown): T | undefined {
  return typeof data === 'object' && data !== null && typeof (data as { type?: unknown }).type === 'string'
    ? (data as T)
    : undefined;
}

/**
 * The filter of these fields (empty ones left out), or undefined when one is not a filter's (an unknown status, too
 * long a text).
 */
export function rolloutFilter(
  fields: Readonly<Partial<Record<keyof RolloutFilter, unknown>>>,
): RolloutFilter | undefined {
  const filter: RolloutFilter = {};
  const { status, mode, search, datasetId, batchId } = fields;
  if (status !== undefined && !(ROLLOUT_STATUSES as readonly unknown[]).includes(status)) return undefined;
  if (mode !== undefined && !(ROLLOUT_MODES as readonly unknown[]).includes(mode)) return undefined;
  if (status !== undefined) filter.status = status as RolloutStatus;
  if (mode !== undefined) filter.mode = mode as RolloutMode;
  for (const [name, value] of [
    ['search', search],
    ['datasetId', datasetId],
    ['batchId', batchId],
  ] as const) {
    if (value === undefined) continue;
    if (typeof value !== 'string' || value.length > FILTER_TEXT_MAX) return undefined;
    filter[name] = value;
  }
  return filter;
}
