/**
 * The trainer's setup advice in the words of where it is read. The CLI's messages say
 * `lightning doctor --setup`; a user of the editor may have no `lightning` on PATH, and the same fix
 * is its **Lightning: Set Up Trainer** command. Pure and zod-free: the extension, the webview and the
 * demo (run from the editor, `LIGHTNING_EDITOR` set) share it.
 */
import type { ErrorKind } from './errors';

/** The command palette's name for `lightning doctor --setup`. */
export const SET_UP_TRAINER = 'Lightning: Set Up Trainer';

/** Set in the environment of CLI commands the editor runs for the user (the demo's terminal). */
export const EDITOR_ENV = 'LIGHTNING_EDITOR';

const DOCTOR =
  /(?:run )?`lightning doctor(?: --setup)?(?: --(?:hf|apt))*`|(?:run )?lightning doctor --setup(?: --(?:hf|apt))*/gi;

/** `text` with every "run `lightning doctor [--setup]`" pointing to **Set Up Trainer** instead. */
export function inEditorWords(text: string): string {
  return text.replace(
    DOCTOR,
    (match) =>
      `${/^run /i.test(match) ? `${match[0] === 'R' ? 'Run' : 'run'} ` : ''}${SET_UP_TRAINER} (Command Palette)`,
  );
}

/** inEditorWords where the process runs for the editor (`LIGHTNING_EDITOR` set), else the text as it is. */
export function forReader(text: string, env: Readonly<Record<string, string | undefined>>): string {
  return env[EDITOR_ENV] ? inEditorWords(text) : text;
}

/**
 * The daemon's error kind says no Python here can run the trainer (none with PyTorch, or it cannot start): Set Up
 * Trainer fixes it (a failed training run, a checkpoint that could not be served).
 */
export function needsTrainerSetup(kind: ErrorKind | null): boolean {
  return kind === 'trainer_unavailable';
}
