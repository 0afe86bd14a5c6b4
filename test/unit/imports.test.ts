/**
 * The layering holds: the editor (extension/, webview/) reaches the daemon only through
 * trainer-daemon/protocol/; the protocol imports nothing else of ours, and nothing Node-only outside
 * protocol/node/; the pages import nothing Node-only and nothing of the extension, the extension nothing of the
 * pages (what both use is in protocol/ui/); no import circles (type imports count: they are the circles that grow
 * into runtime ones), between files or between rooms (a folder importing back a folder that imports it: an arrow
 * that runs up). The same check is run on seeded trees to show that it fails on each kind of violation. The
 * webview's pages bundle no zod: they import the protocol's types only (the extension validates what crosses into it).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import * as esbuild from 'esbuild';
import { layeringViolations } from '../helpers/importGraph';
import { tempDir } from '../helpers/tmp';

const root = path.resolve(__dirname, '../..');

test('the source tree keeps its layers: editor → protocol only, the protocol self-contained and browser-safe but for protocol/node/, extension and pages apart, no circles', () => {
  assert.deepEqual(layeringViolations(root), []);
});

test('the check fails on each kind of violation, in a seeded tree', (t) => {
  const dir = tempDir(t);
  const write = (file: string, text: string): void => {
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), text);
  };
  write('trainer-daemon/protocol/index.ts', "export * from './records';\n");
  write('trainer-daemon/protocol/records.ts', "import type { Store } from '../store/store';\nexport type R = Store;\n");
  write('trainer-daemon/store/store.ts', 'export class Store {}\n');
  write(
    'extension/panel.ts',
    "import { Store } from '../trainer-daemon/store/store';\nimport type { R } from '../trainer-daemon/protocol';\nexport const x: R | Store = new Store();\n",
  );
  write('webview/main.ts', "const lazy = import('../trainer-daemon/store/store');\nexport { lazy };\n");
  write('trainer-daemon/otlp/a.ts', "import type { B } from './b';\nexport type A = B;\n");
  write('trainer-daemon/otlp/b.ts', "export type { A as B } from './a';\n");
  // cli → demo → cli/commands: no file circle, but the rooms import each other.
  write('trainer-daemon/cli/main.ts', "import { demo } from '../demo/main';\nexport const main = demo;\n");
  write('trainer-daemon/cli/commands/train.ts', 'export const train = 1;\n');
  write('trainer-daemon/demo/main.ts', "import { train } from '../cli/commands/train';\nexport const demo = train;\n");
  // Inside the extension: debug/ → checkpoints/ → debug/, no file circle.
  write('extension/debug/start.ts', "import { route } from '../checkpoints/use';\nexport const start = route;\n");
  write('extension/debug/launch.ts', 'export const launch = 1;\n');
  write('extension/checkpoints/use.ts', "import { launch } from '../debug/launch';\nexport const route = launch;\n");
  assert.deepEqual(layeringViolations(dir), [
    { rule: 'editor-reaches-past-protocol', from: 'extension/panel.ts', to: 'trainer-daemon/store/store.ts' },
    { rule: 'editor-reaches-past-protocol', from: 'webview/main.ts', to: 'trainer-daemon/store/store.ts' },
    { rule: 'protocol-imports-out', from: 'trainer-daemon/protocol/records.ts', to: 'trainer-daemon/store/store.ts' },
    { rule: 'circle', files: ['trainer-daemon/otlp/a.ts', 'trainer-daemon/otlp/b.ts'] },
    {
      rule: 'room-circle',
      rooms: ['trainer-daemon/cli', 'trainer-daemon/demo'],
      imports: [
        'trainer-daemon/cli/main.ts → trainer-daemon/demo/main.ts',
        'trainer-daemon/demo/main.ts → trainer-daemon/cli/commands/train.ts',
      ],
    },
    {
      rule: 'room-circle',
      rooms: ['extension/checkpoints', 'extension/debug'],
      imports: [
        'extension/checkpoints/use.ts → extension/debug/launch.ts',
        'extension/debug/start.ts → extension/checkpoints/use.ts',
      ],
    },
  ]);
});

test('the check fails on Node-only imports outside protocol/node/ and on imports between the extension and the pages, in a seeded tree', (t) => {
  const dir = tempDir(t);
  const write = (file: string, text: string): void => {
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), text);
  };
  // Allowed: protocol/node/ on ws and node:*, the extension on it and on vscode, the pages on protocol/ui/.
  write(
    'trainer-daemon/protocol/node/connection.ts',
    "import WebSocket from 'ws';\nimport fs from 'node:fs';\nexport const connect = (): unknown => [WebSocket, fs];\n",
  );
  write(
    'trainer-daemon/protocol/ui/rolloutText.ts',
    "import type { R } from '../records';\nexport const format = (r: R): R => r;\n",
  );
  write(
    'trainer-daemon/protocol/ui/chart.ts',
    "import { readFileSync } from 'fs';\nexport const chart = readFileSync;\n",
  );
  write(
    'trainer-daemon/protocol/records.ts',
    "import type { connect } from './node/connection';\nexport type R = typeof connect;\n",
  );
  write('trainer-daemon/protocol/paths.ts', "import path from 'node:path';\nexport const join = path.join;\n");
  write(
    'extension/panel.ts',
    "import * as vscode from 'vscode';\nimport { connect } from '../trainer-daemon/protocol/node/connection';\n" +
      "import { view } from '../webview/view';\nexport const panel = [vscode, connect, view];\n",
  );
  write('extension/commands.ts', 'export const commands = 1;\n');
  write(
    'webview/main.ts',
    "import { format } from '../trainer-daemon/protocol/ui/rolloutText';\n" +
      "import { connect } from '../trainer-daemon/protocol/node/connection';\nimport fs from 'node:fs';\n" +
      "import { commands } from '../extension/commands';\nexport const main = [format, connect, fs, commands];\n",
  );
  write('webview/view.ts', 'export const view = 1;\n');
  const key = (violation: object): string => JSON.stringify(violation);
  assert.deepEqual(
    layeringViolations(dir).map(key).sort(),
    [
      { rule: 'extension-imports-webview', from: 'extension/panel.ts', to: 'webview/view.ts' },
      { rule: 'protocol-imports-node-only', from: 'trainer-daemon/protocol/paths.ts', to: 'node:path' },
      {
        rule: 'protocol-imports-node-only',
        from: 'trainer-daemon/protocol/records.ts',
        to: 'trainer-daemon/protocol/node/connection.ts',
      },
      { rule: 'protocol-imports-node-only', from: 'trainer-daemon/protocol/ui/chart.ts', to: 'fs' },
      { rule: 'webview-imports-extension', from: 'webview/main.ts', to: 'extension/commands.ts' },
      { rule: 'webview-imports-node-only', from: 'webview/main.ts', to: 'node:fs' },
      {
        rule: 'webview-imports-node-only',
        from: 'webview/main.ts',
        to: 'trainer-daemon/protocol/node/connection.ts',
      },
      // The two imports above between extension/ and webview/ are also an arrow running up between their rooms.
      {
        rule: 'room-circle',
        rooms: ['extension', 'webview'],
        imports: ['extension/panel.ts → webview/view.ts', 'webview/main.ts → extension/commands.ts'],
      },
    ]
      .map(key)
      .sort(),
  );
});

test('the webview bundles ship no zod: no module of the side panel or the editor tabs imports it at run time', async (t) => {
  // The webview build's two entries (esbuild.mjs), bundled as there.
  const result = await esbuild.build({
    entryPoints: { webview: path.join(root, 'webview/main.ts'), editor: path.join(root, 'webview/editor/main.ts') },
    absWorkingDir: root,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    metafile: true,
    outdir: tempDir(t),
    logLevel: 'silent',
  });
  const importers = Object.entries(result.metafile.inputs)
    .filter(
      ([file, input]) =>
        !file.includes('node_modules/') &&
        input.imports.some((imported) => /(^|\/)node_modules\/zod\//.test(imported.path)),
    )
    .map(([file]) => file);
  assert.deepEqual(importers, []);
  assert.ok(
    Object.keys(result.metafile.inputs).includes('webview/editor/compareTab.ts'),
    'the build read the editor tabs',
  );
});
