/**
 * A rollout's statuses and modes as plain lists, and how long a list filter's text may be, without zod:
 * records.ts and rpc.ts make their schemas of them, and the webview, whose bundle ships without zod (it only
 * needs the protocol's types), fills and checks its filters with them.
 */

export const ROLLOUT_STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'timeout'] as const;

/** `optimizer`: the LLM calls a training algorithm (APO) made itself, recorded so they can be inspected. */
export const ROLLOUT_MODES = ['debug', 'train', 'val', 'optimizer'] as const;

/** The longest text a rollout list's filter carries: its search, a dataset or batch id. */
export const FILTER_TEXT_MAX = 200;
