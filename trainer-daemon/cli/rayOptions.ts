/** `--ray ADDRESS` (with `--ray-python`, `--ray-working-dir`): the agents of `dataset run` and `train` as Ray tasks. */
import type { Command } from 'commander';
import type { RayOptions } from '../runner/rayDriver';

export interface RayFlags {
  ray?: string;
  rayPython?: string;
  rayWorkingDir?: string;
}

export function addRayOptions(command: Command): Command {
  return command
    .option(
      '--ray <address>',
      'run the agents as Ray tasks on this existing Ray cluster (HOST:6379, ray://HOST:10001 or auto); their calls come back to the daemon, which must listen where the nodes reach it (`lightning serve --host`; README, "Scale out")',
    )
    .option(
      '--ray-python <path>',
      'the Python with ray that drives the cluster (default: LIGHTNING_RAY_PYTHON, else python3)',
    )
    .option(
      '--ray-working-dir <dir>',
      "ship this folder to every node and run the agents in it (default: run them in the current folder's path on the node)",
    );
}

/** The Ray options the flags ask for, undefined without `--ray`. */
export function rayOptionsFrom(flags: RayFlags, env: NodeJS.ProcessEnv): RayOptions | undefined {
  if (flags.ray === undefined) return undefined;
  return {
    address: flags.ray,
    python: flags.rayPython ?? env.LIGHTNING_RAY_PYTHON ?? 'python3',
    ...(flags.rayWorkingDir ? { workingDir: flags.rayWorkingDir } : {}),
  };
}
