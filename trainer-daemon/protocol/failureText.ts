/**
 * Reading a failed rollout's `error` (written by ./failure.ts): its first line is the reason, the lines
 * after a blank line are the end of the agent's output. Imports nothing: the webview uses it.
 */

/** What a failure's text shows where there is room for one line (a list row, a notification). */
export function failureHeadline(error: string): string {
  return error.split('\n', 1)[0] ?? '';
}

/** The output lines after the headline (empty when it carries none). */
export function failureOutput(error: string): string {
  const blank = error.indexOf('\n\n');
  return blank < 0 ? '' : error.slice(blank + 2);
}
