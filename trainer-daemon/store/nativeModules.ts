/**
 * better-sqlite3 links one V8 ABI: a binary built for one Node will not load in another. The store uses it only where
 * the runtime has no node:sqlite (Node < 22.13), see driver.ts. Loading it fails deep inside `bindings` with an error
 * that names neither the runtime nor the fix; this turns that failure into a message that does.
 */
import { LightningError } from '../protocol/errors';

/** Load errors that mean "this native binary is not for this runtime" (or is missing). */
const ABI_MISMATCH =
  /NODE_MODULE_VERSION|ERR_DLOPEN_FAILED|was compiled against a different|invalid ELF|wrong ELF class|Could not locate the bindings file|Module did not self-register/i;

export class NativeModuleError extends LightningError {}

/** Rethrows a native-module load failure as a NativeModuleError naming the runtime, its ABI and what to set. */
export function explainNativeLoadError(error: unknown, module = 'better-sqlite3'): never {
  const original = error instanceof Error ? error : new Error(String(error));
  const code = (original as NodeJS.ErrnoException).code;
  if (!ABI_MISMATCH.test(original.message) && code !== 'ERR_DLOPEN_FAILED') throw original;
  const electron = process.versions.electron ? `, Electron ${process.versions.electron}` : '';
  throw new NativeModuleError(
    `the native module ${module} cannot load in this runtime (${process.execPath}, Node ${process.version}${electron}, ABI ${process.versions.modules}): ` +
      `${original.message.split('\n')[0]}. Run the daemon on Node ≥ 22.13, whose built-in node:sqlite needs no native module (in VS Code: clear the "lightning.nodePath" setting; the editor's own runtime has it), ` +
      `or rebuild the module for this Node with \`npm rebuild ${module}\`.`,
    { cause: original },
  );
}
