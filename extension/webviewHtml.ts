/**
 * The page of every Lightning webview (the side panel, the editor tabs): a strict CSP with a
 * nonce for the one bundle entry it runs, its stylesheet; scripts only from `dist/` (the webview's
 * only resource root), where the entry imports the build's shared chunks from.
 */
import crypto from 'node:crypto';
import * as vscode from 'vscode';

export function webviewHtml(webview: vscode.Webview, dist: vscode.Uri, entry: 'webview' | 'editor', title: string): string {
  const nonce = crypto.randomBytes(16).toString('base64');
  const script = webview.asWebviewUri(vscode.Uri.joinPath(dist, `${entry}.js`));
  const style = webview.asWebviewUri(vscode.Uri.joinPath(dist, `${entry}.css`));
  const csp = [`default-src 'none'`, `style-src ${webview.cspSource} 'unsafe-inline'`, `font-src ${webview.cspSource}`, `img-src ${webview.cspSource} data:`, `script-src 'nonce-${nonce}' ${webview.cspSource}`].join('; ');
  const escaped = title.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
  return `<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0"><link rel="stylesheet" href="${style}"><title>${escaped}</title></head>
<body><div id="app"></div><script type="module" nonce="${nonce}" src="${script}"></script></body></html>`;
}
