/** `--ray ADDRESS` (with `--ray-python`, `--ray-working-dir`): the agents of `dataset run` and `train` as Ray tasks. */
import { Option } from 'commander';
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

/** The Ray options the flags ask for, undefined without `--ray`. */
export function rayOptionsFrom(flags: RayFlags, env: NodeJS.ProcessEnv): RayOptions | undefined {
  if (flags.ray === undefined) return undefined;
  return {
    address: flags.ray,
    python: flags.rayPython ?? env.LIGHTNING_RAY_PYTHON ?? 'python3',
    ...(flags.rayWorkingDir ? { workingDir: flags.rayWorkingDir } : {}),
  };
}
