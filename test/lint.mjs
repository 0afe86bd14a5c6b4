// `npm run lint`: typescript-eslint (type-aware), Prettier's check and ruff (lint + format check) over the
// TypeScript, JavaScript and Python sources; each tool's findings are printed, and the run fails if any has one.
// `npm run format` rewrites what Prettier and ruff would change (and applies ruff's safe fixes); eslint stays a check.
// ruff is provisioned on first use (test/provision/ruff/requirements.txt pins it) into the git-ignored cache.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { ensureDriverTypes, ensureRuff, ProvisionError, REPO } from './provision/index.mjs';

const fix = process.argv.includes('--fix');
const bin = (name) => path.join(REPO, 'node_modules', '.bin', name);
/** What Prettier formats: every tracked TypeScript and JavaScript source (.prettierignore leaves out the rest). */
const PRETTIER_FILES = ['**/*.ts', '**/*.mjs', 'test/fixtures/**/*.js', 'bin/*.js'];

let ruff;
try {
  // eslint is type-aware: the e2e files' browser-driver types must be there, as for `npm run typecheck`.
  if (!fix) ensureDriverTypes();
  ruff = ensureRuff();
} catch (error) {
  if (!(error instanceof ProvisionError)) throw error;
  console.error(`lint: ${error.message}`);
  process.exit(1);
}

const steps = fix
  ? [
      ['prettier', bin('prettier'), ['--write', '--log-level', 'warn', ...PRETTIER_FILES]],
      ['ruff check --fix', ruff, ['check', '--fix', '.']],
      ['ruff format', ruff, ['format', '.']],
    ]
  : [
      ['eslint', bin('eslint'), ['.']],
      ['prettier --check', bin('prettier'), ['--check', '--log-level', 'warn', ...PRETTIER_FILES]],
      ['ruff check', ruff, ['check', '.']],
      ['ruff format --check', ruff, ['format', '--check', '.']],
    ];

const failed = [];
for (const [name, command, args] of steps) {
  const started = Date.now();
  const result = spawnSync(command, args, { cwd: REPO, stdio: 'inherit' });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (result.status === 0) console.log(`lint: ${name} clean (${seconds} s)`);
  else {
    failed.push(name);
    console.log(
      `lint: ${name} found problems (${seconds} s)${fix ? '' : '; `npm run format` fixes what Prettier and ruff report'}`,
    );
  }
}
if (failed.length > 0) {
  console.error(`lint: failed: ${failed.join(', ')}`);
  process.exit(1);
}
