/**
 * What Set Up Trainer reads from `lightning doctor --json` (protocol/trainer.ts#DoctorDiagnosis): whether the
 * trainer is ready, a headline (torch, device, GPU), the first problem to fix, and the apt-get line `--setup`
 * gives when pip could not reach a package index. Pure: unit-tested.
 */
import { DoctorDiagnosis } from '../../trainer-daemon/protocol/trainer';
import { diagnosisHeadline, diagnosisReady, renderDiagnosis } from '../../trainer-daemon/protocol/doctorText';

export interface DoctorSummary {
  readonly ready: boolean;
  /** "torch 1.13.0 on cpu" / "torch 2.5.1 on cuda (NVIDIA H200, 139.0 GiB free of 140.0 GiB)". */
  readonly headline: string;
  /** The first problem to fix, when there is one. */
  readonly problem: string | undefined;
  /** `apt-get install -y …` when the report says to install PyTorch from the distribution instead. */
  readonly aptCommand: string | undefined;
  /** transformers or peft is missing: Hugging Face models cannot be trained yet. */
  readonly hfMissing: boolean;
  /** The report as `lightning doctor` prints it, for the log. */
  readonly text: string;
}

/**
 * Reads the last line of `lightning doctor --json`'s stdout. A run that printed no report (the CLI failed before it
 * could check) becomes a summary that is not ready, naming what the CLI said.
 */
export function doctorSummary(stdout: string, stderr: string): DoctorSummary {
  const last = stdout.trimEnd().split('\n').at(-1) ?? '';
  let parsed: ReturnType<typeof DoctorDiagnosis.safeParse> | undefined;
  try {
    parsed = DoctorDiagnosis.safeParse(JSON.parse(last));
  } catch {
    parsed = undefined;
  }
  if (!parsed?.success) {
    const said = stderr.trim().split('\n').slice(-3).join(' ') || 'no output';
    const problem = `lightning doctor printed no report (${said})`;
    return { ready: false, headline: 'torch unknown', problem, aptCommand: undefined, hfMissing: false, text: problem };
  }
  const d = parsed.data;
  return {
    ready: diagnosisReady(d),
    headline: diagnosisHeadline(d),
    problem: d.problems.find((p) => !p.optional)?.problem,
    aptCommand: d.aptCommand,
    hfMissing: d.report === null || d.report.transformers === null || d.report.peft === null,
    text: renderDiagnosis(d),
  };
}
