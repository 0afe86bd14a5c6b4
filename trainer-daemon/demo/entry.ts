/** Entry of `npm run demo` (bundled to dist/demo.js). */
import { runDemo } from './main';

runDemo().catch((error: unknown) => {
  process.stderr.write(`demo failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
