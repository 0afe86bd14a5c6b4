/** Exit codes of the `lightning` command, documented in `lightning --help`. */
import { assertNever } from '../protocol/assert';
import { mapError } from '../protocol/errors';

export const ExitCode = {
  Ok: 0,
  Failure: 1,
  Usage: 2,
  NotFound: 3,
  Conflict: 4,
} as const;

export const EXIT_CODES_HELP = `
Exit codes:
  0  success
  1  unexpected failure (see the message)
  2  bad arguments or invalid input
  3  not found (no such rollout, no store, no Python that runs the trainer)
  4  conflict (a rollout cannot make that transition; the store is owned by another daemon)`;

export function exitCodeFor(error: unknown): number {
  const { kind } = mapError(error);
  switch (kind) {
    case 'invalid_input':
      return ExitCode.Usage;
    case 'not_found':
    case 'trainer_unavailable':
      return ExitCode.NotFound;
    case 'conflict':
    case 'invalid_transition':
      return ExitCode.Conflict;
    case 'payload_too_large':
    case 'unsupported_media_type':
    case 'unauthorized':
    case 'overloaded':
    case 'internal':
      return ExitCode.Failure;
    default:
      return assertNever(kind);
  }
}
