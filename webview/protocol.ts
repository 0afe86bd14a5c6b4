/**
 * Messages between the side-panel webview and the extension (postMessage), as zod schemas. Both
 * ends import this module; each validates what it receives with `safeParse`. Records (rollouts,
 * spans, rewards) reuse the daemon protocol's schemas: they are data shapes, not a channel.
 */
import { z } from 'zod';
import { Reward, Rollout, RolloutMode, RolloutStatus, Span } from '../trainer-daemon/protocol/records';
import { RolloutDetail } from '../trainer-daemon/protocol/rpc';

export const DaemonStateKind = z.enum(['stopped', 'starting', 'running', 'failed']);
export type DaemonStateKind = z.infer<typeof DaemonStateKind>;

/** The list's filters (all optional; empty means everything). */
export const RolloutFilter = z.object({
  status: RolloutStatus.optional(),
  mode: RolloutMode.optional(),
  search: z.string().max(200).optional(),
});
export type RolloutFilter = z.infer<typeof RolloutFilter>;

const SpanId = z.string().regex(/^[0-9a-f]{16}$/);

export const WebviewToExtension = z.discriminatedUnion('type', [
  /** The webview is listening: the extension answers with the daemon state. */
  z.object({ type: z.literal('ready') }),
  /** A page of the rollout list; `requestId` ties the answer to the request (filters change under it). */
  z.object({ type: z.literal('listRollouts'), requestId: z.number().int(), filter: RolloutFilter, cursor: z.string().nullable() }),
  z.object({ type: z.literal('selectRollout'), id: z.string().min(1) }),
  z.object({ type: z.literal('loadSpans'), rolloutId: z.string().min(1), afterSequence: z.number().int().nonnegative() }),
  z.object({
    type: z.literal('annotate'),
    rolloutId: z.string().min(1),
    spanId: SpanId.nullable(),
    value: z.number().finite(),
    comment: z.string().max(10_000).nullable(),
  }),
  z.object({ type: z.literal('copy'), text: z.string().max(50_000_000) }),
]);
export type WebviewToExtension = z.infer<typeof WebviewToExtension>;

export const ExtensionToWebview = z.discriminatedUnion('type', [
  z.object({ type: z.literal('daemonState'), state: DaemonStateKind, message: z.string().nullable() }),
  z.object({ type: z.literal('rolloutPage'), requestId: z.number().int(), items: z.array(Rollout), nextCursor: z.string().nullable() }),
  /** Rollouts created or changed (live, from the daemon's notifications). */
  z.object({ type: z.literal('rolloutsChanged'), rollouts: z.array(Rollout) }),
  z.object({ type: z.literal('rolloutDetail'), detail: RolloutDetail }),
  z.object({ type: z.literal('spans'), rolloutId: z.string(), spans: z.array(Span) }),
  /** New spans of a rollout exist (its shown detail fetches them with loadSpans). */
  z.object({ type: z.literal('spansAvailable'), rolloutId: z.string(), toSequence: z.number().int() }),
  /** The rewards of a rollout, after one was added (here or in another window). */
  z.object({ type: z.literal('rewards'), rolloutId: z.string(), items: z.array(Reward) }),
  /** Select a rollout from outside the panel (the review queue). */
  z.object({ type: z.literal('reveal'), id: z.string() }),
  z.object({ type: z.literal('error'), message: z.string() }),
]);
export type ExtensionToWebview = z.infer<typeof ExtensionToWebview>;
