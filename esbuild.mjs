// Builds the three bundles: the extension (VS Code host, CommonJS), the daemon + CLI (Node,
// CommonJS) and the side-panel webview (browser, ESM). `node esbuild.mjs --watch` rebuilds on change;
// `--metafile=FILE` also writes what each output is made of (esbuild's metafile, merged) for the bench.
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const watch = process.argv.includes('--watch');
const metafile = process.argv.find((arg) => arg.startsWith('--metafile='))?.slice('--metafile='.length);

/**
 * Native or editor-provided modules stay outside the bundles; esbuild itself is loaded only to compile TS reward
 * functions.
 */
const nodeExternals = ['vscode', 'better-sqlite3', 'onnxruntime-node', 'esbuild'];

/**
 * zod 4 exports every locale's error messages through its `z.locales` namespace, which bundling
 * cannot tree-shake: ~300 KB of translations in each bundle. Lightning's messages are English, so
 * the namespace is reduced to English (zod's default) — the extension bundle's size target.
 */
const zodEnglishOnly = {
  name: 'zod-english-only',
  setup(build) {
    build.onLoad({ filter: /[\\/]zod[\\/]v4[\\/]locales[\\/]index\.c?js$/ }, (args) => ({
      contents: args.path.endsWith('.cjs')
        ? 'exports.en = require("./en.cjs").default;'
        : 'export { default as en } from "./en.js";',
      resolveDir: path.dirname(args.path),
      loader: 'js',
    }));
  },
};

const common = {
  plugins: [zodEnglishOnly],
  bundle: true,
  sourcemap: true,
  // Minified bundles parse faster (the daemon's start-up); names are kept for errors and stack traces.
  minify: true,
  keepNames: true,
  logLevel: 'warning',
  legalComments: 'none',
};

const builds = [
  {
    // The extension host and the daemon + CLI are both Node (CommonJS) programs.
    ...common,
    entryPoints: {
      extension: 'extension/extension.ts',
      'exit-code': 'extension/debug/exitCodeRecorder.ts',
      'capture-preload': 'trainer-daemon/capture/nodePreload.ts',
      // dist/cli.js runs dist/cli-main.js (the program) through a V8 code cache: trainer-daemon/cliLauncher.ts.
      cli: 'trainer-daemon/cliLauncher.ts',
      'cli-main': 'trainer-daemon/cli.ts',
      demo: 'trainer-daemon/demo/entry.ts',
      'otlp-worker': 'trainer-daemon/otlp/decodeWorker.ts',
    },
    outdir: 'dist',
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: nodeExternals,
  },
  {
    // The demo's sample agent with its openai SDK, so `lightning demo` runs from an installed .vsix (no node_modules
    // there).
    ...common,
    entryPoints: { 'demo-agent': 'trainer-daemon/demo/sample-agent.mjs' },
    outdir: 'dist',
    outExtension: { '.js': '.mjs' },
    platform: 'node',
    format: 'esm',
    target: 'node20',
  },
  {
    ...common,
    // The side panel and the editor tabs: one self-contained script (and stylesheet) each, which the page
    // carries inline (extension/webviewHtml.ts): nothing for the webview to load after the page.
    entryPoints: { webview: 'webview/main.ts', editor: 'webview/editor/main.ts' },
    outdir: 'dist',
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
  },
];

// VS Code's icon font (the codicons @vscode-elements/elements draws with too), beside the bundles: a webview
// loads it from the extension's own files (extension/webviewHtml.ts, its CSP's font-src).
fs.mkdirSync('dist', { recursive: true });
fs.copyFileSync(
  path.join(
    path.dirname(createRequire(import.meta.url).resolve('@vscode/codicons/package.json')),
    'dist',
    'codicon.ttf',
  ),
  path.join('dist', 'codicon.ttf'),
);

if (watch) {
  const contexts = await Promise.all(builds.map((options) => esbuild.context(options)));
  await Promise.all(contexts.map((context) => context.watch()));
  console.error('esbuild: watching for changes');
} else {
  const started = Date.now();
  const results = await Promise.all(
    builds.map((options) => esbuild.build({ ...options, metafile: metafile !== undefined })),
  );
  if (metafile)
    fs.writeFileSync(
      metafile,
      JSON.stringify({ outputs: Object.assign({}, ...results.map((result) => result.metafile.outputs)) }),
    );
  console.error(`esbuild: built extension, cli and webview bundles in ${Date.now() - started} ms`);
}
