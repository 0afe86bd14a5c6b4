// provisionFor (plan.mjs) in a worker thread: its installs block this thread only, and test/run.mjs runs the files that
// need nothing meanwhile. Replies once: { env }, or { error: { message, provision } } where `provision` says it is a
// ProvisionError (its message says what to run) and the message of any other error is its stack.
import { parentPort, workerData } from 'node:worker_threads';
import { ProvisionError } from './index.mjs';
import { provisionFor } from './plan.mjs';

try {
  parentPort.postMessage({ env: provisionFor(workerData) });
} catch (error) {
  const provision = error instanceof ProvisionError;
  const message = error instanceof Error ? (provision ? error.message : (error.stack ?? error.message)) : String(error);
  parentPort.postMessage({ error: { message, provision } });
}
