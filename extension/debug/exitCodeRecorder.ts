/**
 * Preloaded into a Node debuggee by Debug with Lightning (`NODE_OPTIONS=--require …`): VS Code's
 * JavaScript debugger reports no exit code to the editor, so the program writes its own to
 * LIGHTNING_EXIT_CODE_FILE as it exits, and the rollout's status follows it. Only the process that
 * was launched records: the variable is removed before any child process could inherit it.
 */
import fs from 'node:fs';

const file = process.env.LIGHTNING_EXIT_CODE_FILE;
delete process.env.LIGHTNING_EXIT_CODE_FILE;
if (file) {
  process.on('exit', (code) => {
    try {
      fs.writeFileSync(file, String(code));
    } catch {
      // The editor then finalizes the rollout without an exit code.
    }
  });
}
