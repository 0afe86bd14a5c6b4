/**
 * The Ray runner's line protocol (trainer-daemon/python/PROTOCOL.md, "Ray runner"): what
 * `python -m lightning_trainer.ray_runner` prints on stdout, one JSON object per line. The daemon's
 * side (runner/rayPool.ts) writes `start` / `stop` / `shutdown` lines to its stdin.
 */
import { z } from 'zod';
import { RayNode } from './records';

/** Where a Ray task runs: the Ray node (records.ts), as attempts record it. */
export const RayPlacement = RayNode;
export type RayPlacement = RayNode;

export const RayRunnerMessage = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('ready'),
    ray: z.string(),
    address: z.string(),
    nodes: z.array(
      z.object({
        nodeId: z.string(),
        ip: z.string(),
        host: z.string().nullable().optional(),
        cpus: z.number(),
        alive: z.boolean(),
      }),
    ),
  }),
  /** The driver could not connect to the cluster; it exits. */
  z.object({ type: z.literal('fatal'), message: z.string() }),
  /** A request line the driver could not read. */
  z.object({ type: z.literal('error'), message: z.string() }),
  z.object({ type: z.literal('started'), id: z.string(), where: RayPlacement, pid: z.number().int() }),
  /** New output of the agent (stdout and stderr together), in order. */
  z.object({ type: z.literal('log'), id: z.string(), data: z.string() }),
  z.object({
    type: z.literal('exit'),
    id: z.string(),
    code: z.number().int().nullable(),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    where: RayPlacement.nullable().optional(),
    /** Stopped by a `stop` line (Ray cancelled the task). */
    cancelled: z.boolean().optional(),
    /** The command could not be started at all (not found): retrying would fail the same way. */
    unstartable: z.boolean().optional(),
    /** Why it ended without an exit code: the folder is missing on the node, the node or the task died, … */
    error: z.string().optional(),
  }),
]);
export type RayRunnerMessage = z.infer<typeof RayRunnerMessage>;
export type RayExit = Extract<RayRunnerMessage, { type: 'exit' }>;
export type RayReady = Extract<RayRunnerMessage, { type: 'ready' }>;

/**
 * One agent command to run on the cluster. `env` goes on top of the node's environment; `envDefaults` only where the
 * node has none.
 */
export interface RayStart {
  readonly type: 'start';
  readonly id: string;
  readonly command: readonly string[];
  readonly cwd: string | null;
  readonly env: Record<string, string>;
  readonly envDefaults: Record<string, string>;
  readonly timeoutMs: number | null;
  readonly graceMs: number;
}

/** `node 10.0.0.7 (gpu-3)`: how errors and logs name where an agent ran. */
export function describePlacement(where: RayPlacement | null | undefined): string {
  return where ? `node ${where.ip} (${where.host})` : 'an unknown node';
}
