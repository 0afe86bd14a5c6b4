/**
 * `npm run lint`'s comment-width check (test/lintComments.mjs): a line is reported when a comment reaches past column
 * 120 — a line comment, a JSDoc line, a comment after code, one next to a brace, a bracket or a union's `|`, at the end
 * of a block or a type literal, a Python comment alone or after code — and not when the line is long because of a
 * string, a template (however much it looks like a comment) or a docstring.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import { longCommentLines, WIDTH } from '../lintComments.mjs';
import { tempDir } from '../helpers/tmp';

const LONG = 'word '.repeat(40).trim();

/** `lines` written to `dir/name`, joined with `eol`. */
function write(dir: string, name: string, lines: string[], eol = '\n'): void {
  fs.writeFileSync(path.join(dir, name), lines.join(eol));
}

test('comments reaching past 120 columns are reported by file and line, wherever the parser finds them', (t) => {
  const dir = tempDir(t);
  const code = `export const pad = '${'p'.repeat(WIDTH - 22)}';`;
  assert.equal(code.length, WIDTH);
  write(dir, 'a.ts', [
    `// ${LONG}`, // 1
    `/** ${LONG} */`, // 2
    `/**`, // 3
    ` * ${LONG}`, // 4
    ` */`, // 5
    `export const value = 1; // ${LONG}`, // 6
    `export function f(): void {`, // 7
    `  value.toString();`, // 8
    `  // ${LONG}`, // 9: after a block's last statement
    `}`, // 10
    `export type Shape = {`, // 11
    `  a: number;`, // 12
    `  // ${LONG}`, // 13: after a type literal's last member
    `};`, // 14
    `export type Kind =`, // 15
    `  /** ${LONG} */`, // 16: before a union's `|`
    `  | 'a'`, // 17
    `  | 'b';`, // 18
    `export const o = { // ${LONG}`, // 19: after `{`
    `  k: 1,`, // 20
    `};`, // 21
    `${code} // a comment that starts past column 120`, // 22
    '',
  ]);
  write(dir, 'b.py', [`# ${LONG}`, `x = 1  # ${LONG}`, `def g():`, `    """`, `    # ${LONG}`, `    """`, '']);
  assert.deepEqual(longCommentLines(dir, ['a.ts', 'b.py']), [
    'a.ts:1',
    'a.ts:2',
    'a.ts:4',
    'a.ts:6',
    'a.ts:9',
    'a.ts:13',
    'a.ts:16',
    'a.ts:19',
    'a.ts:22',
    'b.py:1',
    'b.py:2',
  ]);
});

test('strings, templates and lines within 120 columns pass (a CRLF line of 120 too)', (t) => {
  const dir = tempDir(t);
  const exact = `// ${'x'.repeat(WIDTH - 3)}`;
  assert.equal(exact.length, WIDTH);
  write(dir, 'c.mjs', [
    exact,
    `export const text = '${LONG}';`,
    'export const template = `',
    `// ${LONG}`,
    '`;',
    `export const url = 'https://example.com/${'a'.repeat(100)}';`,
    '',
  ]);
  write(dir, 'd.ts', ['/*', ` * ${'y'.repeat(WIDTH - 3)}`, ' */', 'export const y = 1;', ''], '\r\n');
  write(dir, 'e.py', [`x = "${LONG}"`, `# ${'z'.repeat(WIDTH - 2)}`, '']);
  assert.deepEqual(longCommentLines(dir, ['c.mjs', 'd.ts', 'e.py']), []);
});
