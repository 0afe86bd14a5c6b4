/**
 * `lightning doctor` (and the editor's Set Up Trainer): what the trainer's Python environment has —
 * Python, torch, CUDA, the GPU and its free memory, transformers/peft — and what is missing, each with
 * its fix; `--setup` creates or repairs the project's venv (`.lightning/venv`, with the system's site
 * packages so a Debian python3-torch counts), installing with pip where an index is reachable and
 * saying exactly what to install where it is not.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DoctorReport, type DoctorDiagnosis } from '../protocol';
import { withPythonPackages } from '../util/pythonPackage';
import { InvalidInputError, NotFoundError } from '../protocol/errors';
import { findPython, pythonCandidates, probePython, venvDir, venvPython, type PythonProbe } from './python';

export const APT_PACKAGES = ['python3-torch', 'libopenblas0-pthread'];
/**
 * Only what torch needs: Debian's python3-torch recommends ~850 MB more (Qt, OpenCV, GDAL…) that training never loads.
 */
export const APT_COMMAND = `apt-get install -y --no-install-recommends ${APT_PACKAGES.join(' ')}`;

/** What `lightning doctor` found (protocol/trainer.ts: the structure `--json` prints). */
export type Diagnosis = DoctorDiagnosis;
export type Problem = DoctorDiagnosis['problems'][number];

/** Runs `python -m lightning_trainer.doctor --json` under the chosen Python. */
function workerReport(python: string): DoctorReport | { error: string } {
  const run = spawnSync(python, ['-m', 'lightning_trainer.doctor', '--json'], {
    encoding: 'utf8',
    timeout: 120_000,
    env: {
      ...process.env,
      PYTHONPATH: withPythonPackages(),
    },
  });
  if (run.error) return { error: run.error.message };
  try {
    const parsed = DoctorReport.safeParse(JSON.parse(run.stdout.trim().split('\n').at(-1) ?? ''));
    if (parsed.success) return parsed.data;
    return { error: `lightning_trainer.doctor printed an unexpected report: ${parsed.error.issues[0]?.message}` };
  } catch {
    return {
      error: `lightning_trainer.doctor failed: ${(run.stderr || run.stdout).trim().split('\n').slice(-3).join(' ')}`,
    };
  }
}

export async function diagnose(
  storeFile: string,
  explicit?: string,
  options: { hf?: boolean } = {},
): Promise<Diagnosis> {
  // A Python the user named is the one to check, not replaced by another that works. The others are
  // tried in order up to the first that imports torch (each probe imports torch: seconds).
  const candidates: PythonProbe[] = [];
  for (const candidate of explicit
    ? [{ executable: explicit, origin: '--python' }]
    : pythonCandidates(storeFile, undefined)) {
    candidates.push(await probePython(candidate));
    if (candidates.at(-1)!.problem === null) break;
  }
  const chosen = candidates.find((c) => c.problem === null) ?? null;
  const problems: Problem[] = [];
  let report: DoctorReport | null = null;
  if (!chosen) {
    problems.push({
      problem: 'no Python with PyTorch',
      fix: `run \`lightning doctor --setup\` (a venv at ${path.relative(process.cwd(), venvDir(storeFile)) || venvDir(storeFile)} with pip install torch); without a package index: ${APT_COMMAND} (Debian/Ubuntu, as root)`,
    });
  } else {
    const result = workerReport(chosen.executable);
    if ('error' in result)
      problems.push({ problem: result.error, fix: 'check the checkout: trainer-daemon/python must be beside the CLI' });
    else {
      report = result;
      // With --hf, Hugging Face models are what the user wants: their packages are not optional.
      problems.push(
        ...result.problems.map((p) =>
          options.hf && /transformers|peft/.test(p.problem)
            ? { ...p, optional: false, fix: `${p.fix} (or: lightning doctor --setup --hf)` }
            : p,
        ),
      );
    }
  }
  return { candidates, chosen, report, problems };
}

export interface SetupOptions {
  readonly hf: boolean;
  /** Install Debian's packages with apt-get when pip cannot (root only). */
  readonly apt: boolean;
  readonly say: (line: string) => void;
}

function run(program: string, args: string[], say: (line: string) => void): Promise<number> {
  say(`$ ${[program, ...args].join(' ')}`);
  return new Promise((resolve) => {
    // Output passes through: pip and apt-get print their own progress.
    const child = spawn(program, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', () => resolve(127));
    child.once('close', (code) => resolve(code ?? 1));
  });
}

/** The Python a venv is made from: the system's, else the first that runs at all. */
async function basePython(storeFile: string): Promise<PythonProbe | undefined> {
  for (const candidate of pythonCandidates(storeFile, undefined).filter((c) => c.origin !== 'venv')) {
    const probe = await probePython(candidate);
    if (probe.version !== null) return probe;
  }
  return undefined;
}

export function canUseApt(): boolean {
  return process.getuid?.() === 0 && fs.existsSync('/usr/bin/apt-get');
}

/** Installs Debian's torch with apt-get (root only), its progress in one line; resolves true when it worked. */
export async function installWithApt(
  say: (line: string) => void,
  line: ProgressLine = progressLine(say),
): Promise<boolean> {
  say(`Installing PyTorch from Debian (${APT_PACKAGES.join(', ')}, without recommended packages; a minute or so)…`);
  if ((await runApt(['update'], say, line)) !== 0) say('apt-get update failed; trying the install anyway');
  return (await runApt(['install', '-y', '--no-install-recommends', ...APT_PACKAGES], say, line)) === 0;
}

/** Where a long job's progress goes: one line, rewritten. */
export interface ProgressLine {
  update(text: string): void;
  /** Ends the line (what follows starts on a new one). */
  done(): void;
}

/** On a terminal, one line rewritten in place; elsewhere (a log, a pipe), a line at each tenth of the way. */
export function progressLine(say: (line: string) => void, out: NodeJS.WriteStream = process.stdout): ProgressLine {
  if (out.isTTY) {
    let shown = false;
    return {
      update: (text) => {
        shown = true;
        out.write(`\r\x1b[K${text.slice(0, Math.max(20, (out.columns || 80) - 1))}`);
      },
      done: () => {
        if (shown) out.write('\n');
        shown = false;
      },
    };
  }
  let last = '';
  return {
    update: (text) => {
      const step = /^(\w+) (\d+)%/.exec(text);
      const key = step ? `${step[1]} ${Math.floor(Number(step[2]) / 10)}` : text;
      if (key !== last) say(text);
      last = key;
    },
    done: () => (last = ''),
  };
}

/**
 * One line of apt's machine-readable status (`-o APT::Status-Fd`): `dlstatus:N:PERCENT:TEXT` while
 * downloading, `pmstatus:PACKAGE:PERCENT:TEXT` while installing; undefined for any other line.
 */
export function aptStatusText(raw: string): string | undefined {
  const match = /^(dlstatus|pmstatus):[^:]*:([\d.]+):(.*)$/.exec(raw.trim());
  if (!match) return undefined;
  return `${match[1] === 'dlstatus' ? 'Downloading' : 'Installing'} ${Math.min(100, Math.floor(Number(match[2])))}% ${match[3]!.trim()}`;
}

/** apt-get with its log held back (its last lines are said if it fails) and its status as the progress line. */
function runApt(args: string[], say: (line: string) => void, line: ProgressLine): Promise<number> {
  say(`$ apt-get ${args.join(' ')}`);
  return new Promise((resolve) => {
    const child = spawn('apt-get', ['-o', 'APT::Status-Fd=3', '-o', 'Dpkg::Use-Pty=0', ...args], {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
    let log = '';
    const keep = (chunk: Buffer): void => {
      log = (log + chunk.toString('utf8')).slice(-8_000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    let pending = '';
    child.stdio[3]?.on('data', (chunk: Buffer) => {
      const lines = (pending + chunk.toString('utf8')).split('\n');
      pending = lines.pop() ?? '';
      for (const raw of lines) {
        const text = aptStatusText(raw);
        if (text) line.update(text);
      }
    });
    child.once('error', () => resolve(127));
    child.once('close', (code) => {
      line.done();
      if (code !== 0) for (const text of log.trimEnd().split('\n').slice(-20)) say(`  ${text}`);
      resolve(code ?? 1);
    });
  });
}

/**
 * Creates (or repairs) `.lightning/venv` and installs what is missing. Returns the problems left
 * (empty when the trainer is ready).
 */
export async function setUpTrainer(storeFile: string, options: SetupOptions): Promise<Diagnosis> {
  const { say } = options;
  const base = await basePython(storeFile);
  if (!base) {
    say(
      'No Python 3 found. Install one (Debian/Ubuntu: apt-get install -y python3 python3-venv), then run this again.',
    );
    return diagnose(storeFile, undefined, options);
  }
  const venv = venvDir(storeFile);
  const python = venvPython(storeFile);
  if ((await probePython({ executable: python, origin: 'venv' })).version === null) {
    fs.mkdirSync(path.dirname(venv), { recursive: true });
    // Without pip at first: with the system's torch visible there is nothing to install (pip comes when needed).
    if (
      (await run(base.executable, ['-m', 'venv', '--system-site-packages', '--without-pip', '--clear', venv], say)) !==
      0
    ) {
      say(`Could not create ${venv}. On Debian/Ubuntu: apt-get install -y python3-venv, then run this again.`);
      return diagnose(storeFile, undefined, options);
    }
  }
  let aptCommand: string | undefined;
  const wanted = [
    ...((await probePython({ executable: python, origin: 'venv' })).torch ? [] : ['torch']),
    ...(options.hf ? ['transformers', 'peft'] : []),
  ];
  if (wanted.length > 0) {
    say(`Installing ${wanted.join(', ')} into ${venv} with pip…`);
    if (spawnSync(python, ['-m', 'pip', '--version']).status !== 0)
      await run(python, ['-m', 'ensurepip', '--upgrade'], say);
    const pip = await run(
      python,
      ['-m', 'pip', 'install', '--retries', '1', '--timeout', '15', '--progress-bar', 'on', ...wanted],
      say,
    );
    if (pip !== 0 && wanted.includes('torch')) {
      if (options.apt && canUseApt()) {
        if (await installWithApt(say)) say('Installed; the venv sees the system packages.');
      } else {
        aptCommand = APT_COMMAND;
        say(
          `pip could not install torch (no package index reachable?). Install it another way, then run \`lightning doctor\`:`,
        );
        say(`  Debian/Ubuntu (as root): ${APT_COMMAND}${canUseApt() ? '   (or: lightning doctor --setup --apt)' : ''}`);
        say(
          '  or, with an index or a wheel file: ' +
            `${python} -m pip install torch   (see https://pytorch.org/get-started/locally/)`,
        );
      }
    } else if (pip !== 0) {
      say(
        `pip could not install ${wanted.join(', ')}: Hugging Face models need them; the tiny built-in model does not.`,
      );
    }
  }
  const diagnosis = await diagnose(storeFile, undefined, options);
  return aptCommand && !diagnosis.chosen ? { ...diagnosis, aptCommand } : diagnosis;
}

/**
 * A Python that can run the trainer, provisioned if need be: as root on Debian, Debian's PyTorch is
 * installed with apt-get (said first); elsewhere the error says exactly what to install.
 */
export async function ensureTrainerPython(storeFile: string, say: (line: string) => void): Promise<PythonProbe> {
  try {
    return await findPython(storeFile);
  } catch (error) {
    if (!canUseApt()) throw error;
    say('No Python with PyTorch found; as root on Debian, the demo installs it.');
    if (!(await installWithApt(say)))
      throw new NotFoundError(`${APT_COMMAND} failed (see above); install PyTorch, then run the demo again`);
    return findPython(storeFile);
  }
}

/**
 * The oldest torch whose FSDP2 (`torch.distributed.fsdp.fully_shard`) the worker shards with (python/…/fsdp.py
 * MIN_TORCH).
 */
export const FSDP_MIN_TORCH = '2.6';

/** Why a torch version (`2.13.0+cpu`, `1.13.0a0`) cannot run `--fsdp`, naming the fix; undefined when it can. */
export function fsdpTorchProblem(torch: string, python: string): string | undefined {
  const [major, minor] = torch.split(/[.+a-z]/).map(Number);
  const [needMajor, needMinor] = FSDP_MIN_TORCH.split('.').map(Number);
  if (major === undefined || minor === undefined || !Number.isFinite(major) || !Number.isFinite(minor))
    return undefined;
  if (major > needMajor! || (major === needMajor && minor >= needMinor!)) return undefined;
  return (
    `--fsdp needs torch ${FSDP_MIN_TORCH} or later (FSDP2, torch.distributed.fsdp.fully_shard); the trainer's Python ` +
    `${python} has torch ${torch}: point --python at a Python with a newer torch (\`lightning doctor --setup\` makes ` +
    `.lightning/venv; pip install 'torch>=${FSDP_MIN_TORCH}' there), or train without --fsdp (one full replica per rank)`
  );
}

/**
 * Before a run with `--fsdp` is recorded: the Python that will run it (as the run will find it) has a torch that
 * shards, else an InvalidInputError naming the fix — not a run that fails once its worker has loaded.
 */
export async function checkFsdpTorch(storeFile: string, python: string | null): Promise<void> {
  const probe = await findPython(storeFile, python ?? undefined);
  const problem = probe.torch === null ? undefined : fsdpTorchProblem(probe.torch, probe.executable);
  if (problem) throw new InvalidInputError(`params.config.distributed.fsdp: ${problem}`);
}
