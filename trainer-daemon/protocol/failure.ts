/**
 * Why a rollout failed, in its `error` text: the reason on the first line — the agent's exception
 * when its output ends with one (a Python traceback's last line, Node's uncaught `Error: …`), with how
 * it ended (`exited with code 1`) — then, after a blank line, the last lines of what it printed
 * (stderr and stdout, or the debug adapter's output). `lightning run`, the batch runner and Debug with
 * Lightning write it (scrubbed of secrets, then the store scrubs it again); the panel's row shows the
 * first line, the rollout tab and `lightning show` the rest. Pure; the webview reads it with ./failureText.
 */
import { scrubMessage, secretsOf } from './secrets';

export { failureHeadline, failureOutput } from './failureText';

/** The output's last lines kept in the error. */
export const FAILURE_TAIL_LINES = 20;
/** A kept line longer than this is cut (a minified stack, a JSON dump). */
const MAX_LINE_CHARS = 300;
/** What of an agent's output is held while it runs: its end, enough for the tail above. */
const HELD_CHARS = 16 * 1024;

/** The end of a process's output as it arrives, at most HELD_CHARS; everything before is dropped. */
export class OutputTail {
  private held = '';
  /** Bytes are decoded as a stream: a character split across two chunks comes out whole (browser-safe, no Buffer). */
  private readonly decoder = new TextDecoder();

  push(chunk: string | Uint8Array): void {
    const text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    this.held = (this.held + text).slice(-HELD_CHARS);
  }

  get text(): string {
    return this.held;
  }
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;

/** The output's last non-blank lines (escape codes removed, long lines cut), oldest first. */
export function lastLines(output: string, count = FAILURE_TAIL_LINES): string[] {
  const lines = output
    .replace(ANSI, '')
    .replace(/\r\n?/g, '\n')
    .split('\n')
    .map((line) => line.trimEnd());
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines
    .slice(-count)
    .map((line) => (line.length > MAX_LINE_CHARS ? `${line.slice(0, MAX_LINE_CHARS - 1)}…` : line));
}

/**
 * An exception's own line: `ValueError: bad input`, `my.pkg.BoomError`, `KeyboardInterrupt` (Python),
 * `TypeError: x is not a function`, `Error [ERR_X]: …`, `Uncaught Error: …` (Node; js-debug's form below). Never
 * indented.
 */
const EXCEPTION_LINE =
  /^(?:Uncaught )?(?:[A-Za-z_$][\w$.]*)?(?:Error|Exception|Interrupt|Exit|Failure)(?: \[[A-Z0-9_]+\])?(?::\s.*)?$/;

/**
 * How VS Code's JavaScript debugger (js-debug) writes an uncaught exception in its console: `Uncaught <class>
 * <the error's own line>` (`Uncaught Error Error: no forecast for Oslo`, `Uncaught TypeError TypeError: …`).
 */
const JS_DEBUG_UNCAUGHT = /^Uncaught [A-Za-z_$][\w$.]* (.+)$/;

/** The last exception line in the output, if it names one. */
export function exceptionOf(output: string): string | undefined {
  const lines = lastLines(output, 200);
  for (let index = lines.length - 1; index >= 0; index -= 1) {
    const line = lines[index]!;
    const own = JS_DEBUG_UNCAUGHT.exec(line)?.[1];
    if (own && EXCEPTION_LINE.test(own)) return own;
    if (EXCEPTION_LINE.test(line)) return line.replace(/^Uncaught /, '');
  }
  return undefined;
}

/**
 * A failed rollout's error: `<exception> (<how it ended>)` or `<how it ended>`, then the output's last
 * lines after a blank line; secret values (the process's, the given ones) redacted. `exception`: what a
 * debugger reported (its `exceptionInfo`), when the output names none.
 */
export function failureText(
  ended: string,
  output: string,
  secrets: readonly string[] = [],
  exception = exceptionOf(output),
): string {
  const all = [...secretsOf(), ...secrets].filter((value) => value.length >= 8).sort((a, b) => b.length - a.length);
  const headline = exception ? `${exception} (${ended})` : ended;
  const tail = lastLines(output);
  return scrubMessage(tail.length > 0 ? `${headline}\n\n${tail.join('\n')}` : headline, all);
}

/** A debug adapter's `exceptionInfo` answer as one exception line (`ZeroDivisionError: division by zero`). */
export function exceptionFromInfo(info: { exceptionId?: unknown; description?: unknown }): string | undefined {
  const id = typeof info.exceptionId === 'string' ? info.exceptionId.trim() : '';
  const description =
    typeof info.description === 'string' ? (lastLines(info.description.split('\n')[0] ?? '', 1)[0] ?? '') : '';
  if (!description) return id || undefined;
  return !id || description.startsWith(id) ? description : `${id}: ${description}`;
}

/** The shell's working folders: `pwd` reads as a password's word, but these hold the paths a traceback names. */
const NOT_SECRET_NAMES = new Set(['PWD', 'OLDPWD']);

/** The values of the environment's secret variables (an agent that prints its key has it redacted). */
export function envSecrets(
  env: Readonly<Record<string, string | undefined>>,
  isSecret: (name: string, value: string) => boolean,
): string[] {
  return Object.entries(env).flatMap(([name, value]) =>
    value && !NOT_SECRET_NAMES.has(name) && isSecret(name, value) ? [value] : [],
  );
}
