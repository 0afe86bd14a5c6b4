/**
 * How a running daemon announces itself: the ready line on stdout (docs/daemon.md) and
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

/** A daemon URL: http on a loopback address, never anywhere else (the token is sent to it). */
export const LoopbackUrl = z
  .string()
  .regex(
    /^http:\/\/(127\.0\.0\.1|localhost|\[::1\]):\d{1,5}$/,
    'must be http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT',
  );

/**
 * `.lightning/daemon.json`. The token itself lives in `daemon.token` beside it, readable by the
 * owner only; `tokenFile` names it for people reading the file, readers never follow it.
 */
export const DiscoveryFile = z.object({
  url: LoopbackUrl,
  pid: z.number().int().positive(),
  store: z.string(),
  tokenFile: z.string(),
  version: z.string(),
  startedAt: z.number(),
});
export type DiscoveryFile = z.infer<typeof DiscoveryFile>;

/**
 * `.lightning/daemon.upgrading`: a daemon upgrading the store an earlier Lightning wrote, before it is ready (and
 * before it writes `daemon.json`). Another window waits for it; a CLI command does not upgrade the store under it.
 */
export const UpgradingFile = z.object({
  pid: z.number().int().positive(),
  from: z.number().int(),
  to: z.number().int(),
  spans: z.number().int(),
});
export type UpgradingFile = z.infer<typeof UpgradingFile>;
