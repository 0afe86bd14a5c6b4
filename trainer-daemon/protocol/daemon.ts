/**
 * How a running daemon announces itself: the ready line on stdout (DESIGN.md, `lightning serve`) and
 * the discovery file beside the store that other commands (`lightning run`, the CLI, the extension)
 * read to find the daemon that owns a store.
 */
import { z } from 'zod';

export const ReadyMessage = z.object({
  event: z.literal('ready'),
  url: z.string().url(),
  token: z.string().min(32),
  store: z.string(),
  pid: z.number().int().positive(),
});
export type ReadyMessage = z.infer<typeof ReadyMessage>;

/** `.lightning/daemon.json`. The token itself lives in `tokenFile`, readable by the owner only. */
export const DiscoveryFile = z.object({
  url: z.string().url(),
  pid: z.number().int().positive(),
  store: z.string(),
  tokenFile: z.string(),
  version: z.string(),
  startedAt: z.number(),
});
export type DiscoveryFile = z.infer<typeof DiscoveryFile>;
