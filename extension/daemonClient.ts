/**
 * The extension's JSON-RPC connection to the daemon: vscode-jsonrpc (the message layer under
 * vscode-languageclient) over the protocol module's WebSocket framing. The LanguageClient class
 * itself is not used because it runs the LSP lifecycle (`initialize`/`shutdown`), which the daemon,
 * not being a language server, does not speak; its supervision idiom lives in supervisor.ts.
 * Params are validated before sending and results after receiving, with the protocol's schemas.
 */
import WebSocket from 'ws';
import { createMessageConnection, ResponseError, type MessageConnection } from 'vscode-jsonrpc/node';
import * as vscode from 'vscode';
import { Methods, type MethodName, type NotificationName, type NotificationParamsOf, type ParamsOf, type ResultOf } from '../trainer-daemon/protocol';
import { checkParams, checkResult, onCheckedNotification } from '../trainer-daemon/protocol/typedRpc';
import { WebSocketMessageReader, WebSocketMessageWriter } from '../trainer-daemon/protocol/wsTransport';

export class DaemonRequestError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

export class DaemonClient implements vscode.Disposable {
  private readonly _onDidClose = new vscode.EventEmitter<void>();
  /** Fires once when the connection is gone (the daemon stopped or crashed). */
  readonly onDidClose = this._onDidClose.event;

  private constructor(
    private readonly socket: WebSocket,
    private readonly connection: MessageConnection,
  ) {
    socket.once('close', () => {
      connection.dispose();
      this._onDidClose.fire();
    });
  }

  static connect(url: string, token: string): Promise<DaemonClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(`${url.replace(/^http/, 'ws')}/rpc`, { headers: { authorization: `Bearer ${token}` }, handshakeTimeout: 5_000, maxPayload: 256 * 1024 * 1024 });
      socket.once('unexpected-response', (_request, response) => {
        socket.terminate();
        reject(new Error(`the daemon at ${url} refused the connection (HTTP ${response.statusCode})`));
      });
      socket.once('error', (error) => reject(new Error(`cannot reach the daemon at ${url}: ${error.message}`)));
      socket.once('open', () => {
        const connection = createMessageConnection(new WebSocketMessageReader(socket), new WebSocketMessageWriter(socket));
        connection.listen();
        resolve(new DaemonClient(socket, connection));
      });
    });
  }

  async request<M extends MethodName>(name: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    const checked = checkParams(name, params);
    if (!checked.ok) throw new DaemonRequestError(checked.message, -32602);
    let raw: unknown;
    try {
      raw = await this.connection.sendRequest(Methods[name].method, params);
    } catch (error) {
      if (error instanceof ResponseError) throw new DaemonRequestError(error.message, error.code);
      throw error;
    }
    const result = checkResult(name, raw);
    if (!result.ok) throw new Error(result.message);
    return result.value;
  }

  onNotification<N extends NotificationName>(name: N, listener: (params: NotificationParamsOf<N>) => void): vscode.Disposable {
    return onCheckedNotification(this.connection, name, listener);
  }

  dispose(): void {
    this.connection.dispose();
    this.socket.close();
    this._onDidClose.dispose();
  }
}
