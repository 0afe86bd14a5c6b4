/** `--ray ADDRESS` (with `--ray-python`, `--ray-working-dir`): the agents of `dataset run` and `train` as Ray tasks. */
import { spawnSync } from 'node:child_process';
import { Option } from 'commander';
import { InvalidInputError, TrainerUnavailableError } from '../protocol/errors';
import type { RayOptions } from '../runner/rayDriver';

export interface RayFlags {
  ray?: string;
  rayPython?: string;
  rayWorkingDir?: string;
}

/** The Ray flags, for a command that starts agents (`dataset run`; `train`, which reads them for grpo only). */
export function rayOptions(): Option[] {
  return [
    new Option(
      '--ray <address>',
      'run the agents as Ray tasks on this existing Ray cluster (HOST:6379, ray://HOST:10001 or auto); their calls come back to the daemon, which must listen where the nodes reach it (`lightning serve --host`; docs/scale-out.md)',
    ),
    new Option(
      '--ray-python <path>',
      'the Python with ray that drives the cluster (default: LIGHTNING_RAY_PYTHON, else python3)',
    ),
    new Option(
      '--ray-working-dir <dir>',
      "ship this folder to every node and run the agents in it (default: run them in the current folder's path on the node)",
    ),
  ];
}

/** Not silently ignored: a --ray-python or --ray-working-dir without --ray is a flag left out. */
export function assertRayFlagsWithRay(flags: RayFlags): void {
  if (flags.ray !== undefined) return;
  const stray = flags.rayPython !== undefined ? '--ray-python' : flags.rayWorkingDir ? '--ray-working-dir' : null;
  if (stray) throw new InvalidInputError(`${stray} applies with --ray only: add --ray ADDRESS, or leave it out`);
}

/** The Ray options the flags ask for, undefined without `--ray`. */
export function rayOptionsFrom(flags: RayFlags, env: NodeJS.ProcessEnv): RayOptions | undefined {
  assertRayFlagsWithRay(flags);
  if (flags.ray === undefined) return undefined;
  return {
    address: flags.ray,
    python: flags.rayPython ?? env.LIGHTNING_RAY_PYTHON ?? 'python3',
    ...(flags.rayWorkingDir ? { workingDir: flags.rayWorkingDir } : {}),
  };
}

/**
 * Whether the Ray options' Python can drive a cluster (imports ray), checked before a batch is recorded: a missing ray
 * is said in a line naming the fix, not as a traceback with the batch's rollouts left queued.
 */
export function assertRayImportable(options: RayOptions): void {
  const probe = spawnSync(options.python, ['-c', 'import ray'], { encoding: 'utf8', timeout: 120_000 });
  if (probe.status === 0) return;
  const why =
    probe.error !== undefined
      ? probe.error.message
      : (/\b(\w*Error: .*)$/m.exec(probe.stderr ?? '')?.[1] ?? `exited with ${probe.status ?? probe.signal}`);
  throw new TrainerUnavailableError(
    `--ray: ${options.python} cannot import ray (${why}); install it there (pip install "ray[default]") or name a Python that has it (--ray-python PATH)`,
  );
}
