/** The `lightning` program (bundled to dist/cli-main.js, which dist/cli.js runs: cliLauncher.ts). */
import { main } from './cli/main';

// A reader that stops early (`lightning checkpoints --help | head`) closes our stdout: what is left to print is
// dropped, as other tools do, never a stack trace; the command itself goes on and ends as it would have.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`lightning: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
