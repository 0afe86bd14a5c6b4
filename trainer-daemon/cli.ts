/** The `lightning` program (bundled to dist/cli-main.js, which dist/cli.js runs: cliLauncher.ts). */
import { main } from './cli/main';

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`lightning: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
