/**
 * What Set Up Trainer reads from `lightning doctor`'s report (cli/commands/doctor.ts prints it):
 * whether the trainer is ready (the exit code), a headline (torch, device, GPU), the first problem
 * to fix, and the apt-get line printed when pip could not reach a package index. Pure: unit-tested.
 */
export interface DoctorSummary {
  readonly ready: boolean;
  /** "torch 1.13.0 on cpu" / "torch 2.5.1 on cuda (NVIDIA H200, 139.0 GiB free of 140.0 GiB)". */
  readonly headline: string;
  /** The first line under "To fix:", when there is one. */
  readonly problem: string | undefined;
  /** `apt-get install -y …` when the report says to install PyTorch from the distribution instead. */
  readonly aptCommand: string | undefined;
  /** transformers or peft is missing: Hugging Face models cannot be trained yet. */
  readonly hfMissing: boolean;
}

const field = (report: string, name: string): string | undefined =>
  new RegExp(`^${name}\\s+(.+)$`, 'm').exec(report)?.[1]?.trim();

export function doctorSummary(report: string, exitCode: number | null): DoctorSummary {
  const lines = report.split('\n');
  const fixAt = lines.findIndex((line) => line.trim() === 'To fix:');
  const gpu = field(report, 'GPU');
  const headline = `torch ${field(report, 'torch') ?? 'missing'} on ${field(report, 'device') ?? '-'}${gpu && gpu !== 'none' ? ` (${gpu})` : ''}`;
  const setupFailed = /pip could not install torch/.test(report);
  return {
    ready: exitCode === 0,
    headline,
    problem: fixAt >= 0 ? lines[fixAt + 1]?.trim() : undefined,
    hfMissing: /^(transformers|peft)\s+missing$/m.test(report),
    aptCommand: exitCode !== 0 && setupFailed ? /apt-get install -y [\w.+ -]*[\w.+-]/.exec(report)?.[0] : undefined,
  };
}
