/**
 * The `lightning` binary's first file (bundled to dist/cli.js, what `bin/lightning.js`, the extension and the tests
 * run): it runs the program, bundled beside it as dist/cli-main.js, through a V8 code cache, so that a command does
 * not compile a megabyte of JavaScript again every time it starts (measured here: a sixth of `lightning --version`'s
 * CPU, a third of the CLI test file's). Node 22's `module.enableCompileCache` does the same; this runs on Node 20
 * and in the editor's runtime too.
 *
 * The cache is one file beside the program per V8 version (the editor's runtime and the system's Node keep one each),
 * starting with the SHA-256 of the program's source: V8 itself checks only the source's length and its own version
 * and flags, so a rebuilt program of the same length must not meet the old cache. A missing, stale or rejected cache
 * is written again once the program has started (to a temporary file renamed into place, so processes starting
 * together never read half a file); where it cannot be written (an installation on a read-only disk) the program
 * simply runs without one. Only Node's own modules here: nothing else is loaded before the program.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import Module from 'node:module';
import path from 'node:path';
import vm from 'node:vm';

const PROGRAM = path.join(__dirname, 'cli-main.js');
const KEY_BYTES = 32;

function readCache(file: string, key: Buffer): Buffer | undefined {
  try {
    const data = fs.readFileSync(file);
    return data.length > KEY_BYTES && data.subarray(0, KEY_BYTES).equals(key) ? data.subarray(KEY_BYTES) : undefined;
  } catch {
    return undefined; // none yet
  }
}

function writeCache(file: string, key: Buffer, data: Buffer): void {
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(temporary, Buffer.concat([key, data]));
    fs.renameSync(temporary, file);
  } catch {
    // A cache is only a saving: a folder that cannot take it (read-only, full) leaves the program running without one.
    fs.rmSync(temporary, { force: true });
  }
}

function run(): void {
  const bytes = fs.readFileSync(PROGRAM);
  const key = crypto.createHash('sha256').update(bytes).digest();
  const source = bytes.toString('utf8');
  const cacheFile = path.join(__dirname, `.cli-main.${process.versions.v8}.v8cache`);
  const cachedData = readCache(cacheFile, key);
  const script = new vm.Script(Module.wrap(source), {
    filename: PROGRAM,
    cachedData,
    // What `import()` would do in a module Node loaded itself (Node ≥ 20.12); the program makes no such call today.
    importModuleDynamically: vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const program = new Module(PROGRAM, module);
  program.filename = PROGRAM;
  const wrapper = script.runInThisContext() as (
    exports: unknown,
    require: NodeJS.Require,
    module: Module,
    filename: string,
    dirname: string,
  ) => void;
  wrapper.call(program.exports, program.exports, Module.createRequire(PROGRAM), program, PROGRAM, __dirname);
  program.loaded = true;
  // After the program's start, so the cache also holds the functions its start compiled.
  if (cachedData === undefined || script.cachedDataRejected) writeCache(cacheFile, key, script.createCachedData());
}

run();
