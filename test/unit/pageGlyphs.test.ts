/**
 * The pages draw icons with VS Code's codicons, never with symbol characters: a status glyph (✓ ✗ ◌ ◷ ⊘ ●),
 * a warning sign (⚠), a cross (✕) or an emoji (👍) is a box wherever the machine has no font that holds it, and
 * reads unlike the editor around it. Checked on what ships: the side panel's and the editor tabs' bundles
 * (esbuild.mjs's two entries, every module they import, string escapes resolved), and on a seeded page to
 * show the check fails.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import * as esbuild from 'esbuild';
import { tempDir } from '../helpers/tmp';

const root = path.resolve(__dirname, '../..');

/**
 * Symbol characters a page must not draw: Miscellaneous Technical, Geometric Shapes, Miscellaneous Symbols,
 * Dingbats, Miscellaneous Symbols and Arrows, the emoji planes, and ⊘. Typography (— … · “ ” →, ±, ×) stays.
 */
const SYMBOL = /[\u2298\u2300-\u23ff\u25a0-\u27bf\u2b00-\u2bff\u{1f000}-\u{1faff}]/u;

/** Each symbol a bundle carries, with the source modules that carry it (in their text), as `✓ (webview/x.ts)`. */
async function symbolsIn(entryPoints: Record<string, string>, outdir: string): Promise<string[]> {
  const result = await esbuild.build({
    entryPoints,
    absWorkingDir: root,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    charset: 'utf8',
    write: false,
    metafile: true,
    outdir,
    logLevel: 'silent',
  });
  const found = new Set<string>();
  for (const file of result.outputFiles.filter((output) => output.path.endsWith('.js')))
    for (const char of file.text) if (SYMBOL.test(char)) found.add(char);
  const ours = Object.keys(result.metafile.inputs).filter((input) => !input.includes('node_modules/'));
  return [...found].map((char) => {
    const modules = ours.filter((input) => fs.readFileSync(path.resolve(root, input), 'utf8').includes(char));
    return `${char} (${modules.join(', ') || 'an escape in a module'})`;
  });
}

test('no page module draws a symbol character: statuses, warnings, crosses and ratings are codicons', async (t) => {
  assert.deepEqual(
    await symbolsIn(
      { webview: path.join(root, 'webview/main.ts'), editor: path.join(root, 'webview/editor/main.ts') },
      tempDir(t),
    ),
    [],
  );
});

test('the check finds a status glyph and an escaped warning sign in a seeded page', async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, 'page.ts'), "export const icons = ['✓ done', '\\u26a0 careful', '→ fine'];\n");
  const found = await symbolsIn({ page: path.join(dir, 'page.ts') }, path.join(dir, 'out'));
  assert.deepEqual(found.map((entry) => entry.slice(0, 1)).sort(), ['⚠', '✓']);
});
