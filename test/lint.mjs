// `npm run lint`: typescript-eslint (type-aware), Prettier's check, ruff (lint + format check) and the comments' width
// (test/lintComments.mjs) over the TypeScript, JavaScript and Python sources; each tool's findings are printed, and
// the run fails if any has one.
// `npm run format` rewrites what Prettier and ruff would change (and applies ruff's safe fixes); eslint stays a check.
// ruff is provisioned on first use (test/provision/ruff/requirements.txt pins it) into the git-ignored cache.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { longCommentLines, WIDTH } from './lintComments.mjs';
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
      [`comments within ${WIDTH} columns`, checkComments],
    ];

/**
 * Prints the comment lines past WIDTH columns in the sources git knows (tracked, or new and not ignored, as eslint and
 * Prettier see them); status 1 when there is one.
 */
function checkComments() {
  const patterns = ['*.ts', '*.mts', '*.mjs', '*.cjs', '*.py', 'bin/*.js', 'test/fixtures/**/*.js'];
  const listed = spawnSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', ...patterns], {
    cwd: REPO,
    encoding: 'utf8',
  });
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr || listed.error}`);
  // A tracked file deleted in the working tree is not there to read.
  const files = [...new Set(listed.stdout.split('\n'))].filter((file) => file && fs.existsSync(path.join(REPO, file)));
  const found = longCommentLines(REPO, files);
  for (const line of found) console.log(`${line}: a comment reaches past column ${WIDTH}; wrap it`);
  return {
    status: found.length === 0 ? 0 : 1,
    hint: 'wrap the comments named above (Prettier leaves comments as they are)',
  };
}

const failed = [];
for (const [name, command, args] of steps) {
  const started = Date.now();
  const result = typeof command === 'function' ? command() : spawnSync(command, args, { cwd: REPO, stdio: 'inherit' });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (result.status === 0) console.log(`lint: ${name} clean (${seconds} s)`);
  else {
    failed.push(name);
    const hint = result.hint ?? (fix ? '' : '`npm run format` fixes what Prettier and ruff report');
    console.log(`lint: ${name} found problems (${seconds} s)${hint ? `; ${hint}` : ''}`);
  }
}
if (failed.length > 0) {
  console.error(`lint: failed: ${failed.join(', ')}`);
  process.exit(1);
}
