/**
 * The page of every Lightning webview (the side panel, the editor tabs): a strict CSP with a
 * nonce for the one bundle entry it runs, its stylesheet; scripts only from `dist/` (the webview's
 * only resource root), where the entry imports the build's shared chunks from.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import * as vscode from 'vscode';
import type { ExtensionToEditor } from '../webview/editor/editorProtocol';
import { initialMessagesText } from '../webview/editor/editorTarget';

/** The shared chunks each entry imports (dist/chunks/preload.json, written by esbuild.mjs), read once; none if it is missing. */
let preload: Record<string, string[]> | undefined;
function chunksOf(dist: vscode.Uri, entry: string): string[] {
  if (!preload) {
    try {
      const parsed: unknown = JSON.parse(fs.readFileSync(vscode.Uri.joinPath(dist, 'chunks', 'preload.json').fsPath, 'utf8'));
      preload = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, string[]>) : {};
    } catch {
      preload = {};
    }
  }
  const chunks = preload[entry];
  return Array.isArray(chunks) ? chunks.filter((name) => typeof name === 'string' && /^[\w.-]+\.js$/.test(name)) : [];
}

/**
 * `initial`: messages the page reads before any posted one (its first screen, written into the page: no
 * round trip to the extension before the first paint), as JSON in an inert `<script type="application/json">`.
 * `marks`: the extension's timestamps (epoch ms) for this page, as `data-*` attributes of `#app`
 * (e.g. `{ openedAt }` → `data-opened-at`): the page and the e2e line them up with the page's own clock.
 */
export function webviewHtml(webview: vscode.Webview, dist: vscode.Uri, entry: 'webview' | 'editor', title: string, marks: Record<string, number> = {}, initial: readonly ExtensionToEditor[] = []): string {
  const nonce = crypto.randomBytes(16).toString('base64');
  const script = webview.asWebviewUri(vscode.Uri.joinPath(dist, `${entry}.js`));
  const style = webview.asWebviewUri(vscode.Uri.joinPath(dist, `${entry}.css`));
  const csp = [`default-src 'none'`, `style-src ${webview.cspSource} 'unsafe-inline'`, `font-src ${webview.cspSource}`, `img-src ${webview.cspSource} data:`, `script-src 'nonce-${nonce}' ${webview.cspSource}`].join('; ');
  // The entry's chunks load beside it, not after it has loaded and named them (measured: ~40% of a new tab's script load).
  const preloads = chunksOf(dist, entry).map((name) => `<link rel="modulepreload" href="${webview.asWebviewUri(vscode.Uri.joinPath(dist, 'chunks', name))}">`).join('');
  const escaped = title.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
  const data = Object.entries(marks).map(([name, value]) => ` data-${name.replace(/[A-Z]/g, (ch) => `-${ch.toLowerCase()}`)}="${Math.round(value)}"`).join('');
  return `<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0"><link rel="stylesheet" href="${style}">${preloads}<title>${escaped}</title></head>
<body><div id="app"${data}></div>${initialMessages(initial)}<script type="module" nonce="${nonce}" src="${script}"></script></body></html>`;
}

function initialMessages(messages: readonly ExtensionToEditor[]): string {
  return messages.length === 0 ? '' : `<script type="application/json" id="initial-messages">${initialMessagesText(messages)}</script>`;
}
