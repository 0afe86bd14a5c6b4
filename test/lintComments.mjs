// The comment-width check of `npm run lint`: Prettier wraps code at 120 columns but leaves comments as they are, so a
// line is reported (FILE:LINE) when a comment reaches past column 120: in TypeScript and JavaScript, comments found by
// TypeScript's parser around every token (text in strings and templates is never taken for one); in Python, the
// COMMENT tokens of Python's own tokenizer. A line that is long because of a string literal passes: strings are not
// wrapped, so that a message can be found by searching for it.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

export const WIDTH = 120;

/** The comments' [start, end) offsets in a TypeScript or JavaScript source: those before and after every token. */
function commentRanges(file, text) {
  const kind = file.endsWith('.ts') || file.endsWith('.mts') ? ts.ScriptKind.TS : ts.ScriptKind.JS;
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const ranges = new Map();
  const add = (list) => list?.forEach((range) => ranges.set(range.pos, range.end));
  const visit = (node) => {
    const children = node.getChildren(source);
    if (children.length === 0) {
      add(ts.getLeadingCommentRanges(text, node.pos));
      add(ts.getTrailingCommentRanges(text, node.end));
    }
    children.forEach(visit);
  };
  visit(source);
  return [...ranges];
}

/** Python's COMMENT tokens past WIDTH columns, as `file:line`, from one python3 run over `files`. */
function longPythonComments(root, files) {
  if (files.length === 0) return [];
  const script = [
    'import sys, tokenize',
    'for name in sys.argv[1:]:',
    '    with open(name, "rb") as f:',
    '        for t in tokenize.tokenize(f.readline):',
    `            if t.type == tokenize.COMMENT and t.end[1] > ${WIDTH}: print(f"{name}:{t.start[0]}")`,
  ].join('\n');
  const result = spawnSync('python3', ['-c', script, ...files], { cwd: root, encoding: 'utf8' });
  if (result.status !== 0)
    throw new Error(`python3 could not read the Python sources: ${result.stderr || result.error}`);
  return result.stdout.split('\n').filter(Boolean);
}

/** `file:line` of each line in `files` (paths relative to `root`) where a comment reaches past WIDTH columns. */
export function longCommentLines(root, files) {
  const python = files.filter((name) => name.endsWith('.py'));
  const found = [];
  for (const file of files.filter((name) => !name.endsWith('.py'))) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    const ranges = commentRanges(file, text);
    let offset = 0;
    text.split('\n').forEach((line, i) => {
      const width = line.endsWith('\r') ? line.length - 1 : line.length;
      const from = offset + WIDTH;
      const to = offset + width;
      if (width > WIDTH && ranges.some(([start, end]) => start < to && end > from)) found.push(`${file}:${i + 1}`);
      offset += line.length + 1;
    });
  }
  // Python's tokenizer counts columns in characters, as `line.length` does above.
  return [...found, ...longPythonComments(root, python)];
}
