/**
 * The side panel's browser code. It speaks only to the extension, through ./protocol.
 */
import '@vscode-elements/elements/dist/vscode-badge/index.js';
import { ExtensionToWebview, type WebviewToExtension } from './protocol';

interface VsCodeApi {
  postMessage(message: WebviewToExtension): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const state = document.createElement('vscode-badge');
state.textContent = 'starting';
document.body.append(state);

window.addEventListener('message', (event: MessageEvent<unknown>) => {
  const message = ExtensionToWebview.safeParse(event.data);
  if (!message.success) return;
  if (message.data.type === 'daemonState') state.textContent = message.data.state;
});

vscode.postMessage({ type: 'ready' });
