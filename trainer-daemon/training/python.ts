/**
 * Which Python runs the trainer worker: `--python` / `LIGHTNING_PYTHON`, the project's venv at
 * `.lightning/venv`, `/usr/bin/python3`, then `python3` on PATH — the first that imports torch. A
 * pyenv shim often comes first on PATH without torch, which is why the system Python is tried first.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { TrainerUnavailableError } from '../protocol/errors';
import type { PythonProbe as ProtocolPythonProbe } from '../protocol/trainer';

export interface PythonCandidate {
  readonly executable: string;
  /** Where the candidate came from, for people: `--python`, `LIGHTNING_PYTHON`, `venv`, `system`, `PATH`. */
  readonly origin: string;
}

/** A candidate as probed (protocol/trainer.ts: `lightning doctor --json` prints these). */
export type PythonProbe = ProtocolPythonProbe;

/** The project's own environment, made by `lightning doctor --setup`. */
export function venvDir(storeFile: string): string {
  return path.join(path.dirname(storeFile), 'venv');
}

export function venvPython(storeFile: string): string {
  return path.join(venvDir(storeFile), 'bin', 'python');
}

export function pythonCandidates(
  storeFile: string,
  explicit: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): PythonCandidate[] {
  const list: PythonCandidate[] = [];
  if (explicit) list.push({ executable: explicit, origin: '--python' });
  if (env.LIGHTNING_PYTHON) list.push({ executable: env.LIGHTNING_PYTHON, origin: 'LIGHTNING_PYTHON' });
  list.push({ executable: venvPython(storeFile), origin: 'venv' });
  list.push({ executable: '/usr/bin/python3', origin: 'system' });
  list.push({ executable: 'python3', origin: 'PATH' });
  return list;
}

const PROBE =
  'import sys\ntry:\n import torch; t = torch.__version__\nexcept Exception as e:\n t = None\nprint(sys.version.split()[0]); print(t)';

/**
 * Runs the candidate (importing torch takes seconds): asynchronously, so a daemon that probes before
 * a training run keeps answering its clients meanwhile.
 */
export async function probePython(candidate: PythonCandidate): Promise<PythonProbe> {
  if (candidate.executable.includes(path.sep) && !fs.existsSync(candidate.executable)) {
    return { ...candidate, version: null, torch: null, problem: 'not found' };
  }
  const run = await new Promise<{ error: Error | null; status: number | null; stdout: string; stderr: string }>(
    (resolve) => {
      execFile(candidate.executable, ['-c', PROBE], { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
        const status = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        resolve({ error: error !== null && status === null ? error : null, status, stdout, stderr });
      });
    },
  );
  if (run.error || run.status !== 0)
    return {
      ...candidate,
      version: null,
      torch: null,
      problem: run.error
        ? run.error.message
        : `exited with ${run.status}: ${run.stderr.trim().split('\n').at(-1) ?? ''}`,
    };
  const [version, torch] = run.stdout.trim().split('\n');
  const hasTorch = torch !== undefined && torch !== 'None';
  return {
    ...candidate,
    version: version ?? null,
    torch: hasTorch ? torch : null,
    problem: hasTorch ? null : 'no torch',
  };
}

/**
 * The first candidate that imports torch. An explicit choice (`--python`, `LIGHTNING_PYTHON`) that
 * cannot is an error rather than silently replaced by another Python.
 */
export async function findPython(
  storeFile: string,
  explicit?: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<PythonProbe> {
  const probes: PythonProbe[] = [];
  for (const candidate of pythonCandidates(storeFile, explicit, env)) {
    const probe = await probePython(candidate);
    if (probe.problem === null) return probe;
    probes.push(probe);
    if (candidate.origin === '--python' || candidate.origin === 'LIGHTNING_PYTHON') {
      throw new TrainerUnavailableError(
        `${candidate.origin} ${candidate.executable} cannot run the trainer: ${probe.problem}. Run \`lightning doctor\`.`,
      );
    }
  }
  throw new TrainerUnavailableError(
    `no Python with PyTorch found (tried ${probes.map((p) => `${p.executable}: ${p.problem}`).join('; ')}). ` +
      'Run `lightning doctor --setup`, or install it: apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread (Debian/Ubuntu) or pip install torch.',
  );
}
