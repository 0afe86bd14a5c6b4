/**
 * `lightning doctor`'s report as people read it, from the one structure `--json` prints (DoctorDiagnosis): the CLI
 * prints this text, the editor's Set Up Trainer writes it to its log and reads the structure itself.
 */
import type { DoctorDiagnosis } from './trainer';

const gib = (bytes: number): string => `${(bytes / 2 ** 30).toFixed(1)} GiB`;

/** No Python with PyTorch, or a problem that is not optional: the trainer cannot run yet. */
export function diagnosisReady(d: DoctorDiagnosis): boolean {
  return d.chosen !== null && d.problems.every((p) => p.optional);
}

/** "torch 1.13.0 (BLAS: openblas) on cpu" / "torch 2.5.1 on cuda (NVIDIA H200, 139.0 GiB free of 140.0 GiB)". */
export function diagnosisHeadline(d: DoctorDiagnosis): string {
  const r = d.report;
  const torch = `torch ${r?.torch ?? d.chosen?.torch ?? 'missing'}${r?.blas ? ` (BLAS: ${r.blas})` : ''}`;
  return `${torch} on ${r?.device ?? '-'}${r?.cuda ? ` (${gpuText(r.cuda)})` : ''}`;
}

function gpuText(cuda: NonNullable<NonNullable<DoctorDiagnosis['report']>['cuda']>): string {
  return `${cuda.name}, ${gib(cuda.memoryFreeBytes)} free of ${gib(cuda.memoryTotalBytes)}`;
}

export function renderDiagnosis(d: DoctorDiagnosis): string {
  const r = d.report;
  const lines = [
    `Python        ${d.chosen ? `${d.chosen.executable} (${d.chosen.origin}) ${d.chosen.version}` : 'none with PyTorch'}`,
    `torch         ${r?.torch ?? d.chosen?.torch ?? 'missing'}${r?.blas ? ` (BLAS: ${r.blas})` : ''}`,
    `device        ${r?.device ?? '-'}`,
    `GPU           ${r?.cuda ? gpuText(r.cuda) : 'none'}`,
    `transformers  ${r?.transformers ?? 'missing'}`,
    `peft          ${r?.peft ?? 'missing'}`,
  ];
  if (r) lines.push(`pip index     ${r.pipReachesIndex ? 'reachable' : 'not reachable'}`);
  if (!d.chosen) for (const c of d.candidates) lines.push(`  tried ${c.executable} (${c.origin}): ${c.problem}`);
  const list = (title: string, problems: DoctorDiagnosis['problems']): void => {
    if (problems.length === 0) return;
    lines.push('', title);
    for (const p of problems) lines.push(`  ${p.problem}\n    → ${p.fix}`);
  };
  list(
    'To fix:',
    d.problems.filter((p) => !p.optional),
  );
  list(
    'Optional (only some features need these):',
    d.problems.filter((p) => p.optional),
  );
  lines.push('', diagnosisReady(d) ? 'The trainer is ready.' : 'The trainer is not ready.');
  return lines.join('\n');
}
