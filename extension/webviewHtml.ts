/**
 * The page of every Lightning webview (the side panel, the editor tabs): a strict CSP with a
 * nonce for the one script it runs. The page carries its bundle's script and stylesheet inline
 * (dist/<entry>.js and .css, each one self-contained file): a webview loads each file of its own
 * through VS Code's resource loader, which took 0.1–0.2 s of a new tab's start (e2e), after the page
 * itself had come.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import * as vscode from 'vscode';
import type { ExtensionToEditor } from '../trainer-daemon/protocol/ui/editorMessages';
import { initialMessagesText } from '../trainer-daemon/protocol/ui/editorTarget';
import { inlineText } from './inlineText';

/**
 * A built file's text for an inline element (./inlineText), read when a page is made (~150 KB: well under a
 * millisecond; read each time, so `esbuild --watch` output shows in the next page); its source map comment
 * names the map by its webview URI (the inline text has no file of its own).
 */
function builtText(webview: vscode.Webview, dist: vscode.Uri, file: string): string {
  const path = vscode.Uri.joinPath(dist, file);
  let text: string;
  try {
    text = fs.readFileSync(path.fsPath, 'utf8');
  } catch {
    throw new Error(`${path.fsPath} is missing: build the extension first (npm run build)`);
  }
  return inlineText(text, file.endsWith('.css') ? 'css' : 'js').replace(
    /(?<=[/*]# )sourceMappingURL=([\w.-]+\.map)/,
    (_, map: string) => `sourceMappingURL=${webview.asWebviewUri(vscode.Uri.joinPath(dist, map)).toString()}`,
  );
}

/**
 * `initial`: messages the page reads before any posted one (its first screen, written into the page: no
 * round trip to the extension before the first paint), as JSON in an inert `<script type="application/json">`.
 * `marks`: the extension's timestamps (epoch ms) for this page, as `data-*` attributes of `#app`
 * (e.g. `{ openedAt }` → `data-opened-at`): the page and the e2e line them up with the page's own clock.
 */
export function webviewHtml(
  webview: vscode.Webview,
  dist: vscode.Uri,
  entry: 'webview' | 'editor',
  title: string,
  marks: Record<string, number> = {},
  initial: readonly ExtensionToEditor[] = [],
): string {
  const nonce = crypto.randomBytes(16).toString('base64');
  const csp = [
    `default-src 'none'`,
    `style-src ${webview.cspSource} 'unsafe-inline'`,
    `font-src ${webview.cspSource}`,
    `img-src ${webview.cspSource} data:`,
    `script-src 'nonce-${nonce}'`,
  ].join('; ');
  const escaped = title.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
  const data = Object.entries(marks)
    .map(([name, value]) => ` data-${name.replace(/[A-Z]/g, (ch) => `-${ch.toLowerCase()}`)}="${Math.round(value)}"`)
    .join('');
  return `<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0"><style>${codiconFont(webview, dist)}${builtText(webview, dist, `${entry}.css`)}</style><title>${escaped}</title></head>
<body><div id="app"${data}></div>${initialMessages(initial)}<script type="module" nonce="${nonce}">${builtText(webview, dist, `${entry}.js`)}</script></body></html>`;
}

/**
 * VS Code's icon font from the extension's own dist/ (the CSP's font-src allows the webview's resource origin);
 * webview/codicons.css names the glyphs.
 */
function codiconFont(webview: vscode.Webview, dist: vscode.Uri): string {
  return `@font-face { font-family: "codicon"; font-display: block; src: url("${webview.asWebviewUri(vscode.Uri.joinPath(dist, 'codicon.ttf')).toString()}") format("truetype"); }`;
}

function initialMessages(messages: readonly ExtensionToEditor[]): string {
  return messages.length === 0
    ? ''
    : `<script type="application/json" id="initial-messages">${initialMessagesText(messages)}</script>`;
}
