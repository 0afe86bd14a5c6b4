/**
 * The one client connection to the daemon: JSON-RPC (vscode-jsonrpc) over the WebSocket framing of
 * `wsTransport.ts`, with the bearer token. Every client wraps it: the CLI, tests and benchmarks use it
 * as is; the extension's `DaemonClient` adds its output channel. Params are checked before sending
 * and results after receiving, with the same schemas the server uses; an error the daemon answers
 * with comes back as a `DaemonError` of the same kind.
 */
import { createMessageConnection, ResponseError, type MessageConnection } from 'vscode-jsonrpc/node';
import WebSocket from 'ws';
import {
  Methods,
  type MethodName,
  type NotificationName,
  type NotificationParamsOf,
  type ParamsOf,
  type ResultOf,
} from '../rpc';
import { checkParams, checkResult, onCheckedNotification } from '../typedRpc';
import { WebSocketMessageReader, WebSocketMessageWriter } from './wsTransport';
import { fromResponseError, InvalidInputError, LightningError } from '../errors';
import { Emitter, type Disposable } from '../event';

export interface ConnectOptions {
  /** How long the WebSocket handshake may take (default 5 s). */
  readonly timeoutMs?: number;
}

export class RpcClient implements Disposable {
  private readonly _onDidClose = new Emitter<void>();
  /** Fires once when the connection is gone (the daemon stopped or crashed); pending requests fail. */
  readonly onDidClose = this._onDidClose.event;

  private constructor(
    private readonly socket: WebSocket,
    /** The message connection, for what the typed surface does not cover (tracing). */
    readonly connection: MessageConnection,
  ) {
    socket.once('close', () => {
      // When the daemon goes away, fail every pending request instead of leaving it unanswered.
      connection.dispose();
      this._onDidClose.fire();
      this._onDidClose.dispose();
    });
  }

  /** Connects to `ws://…/rpc` of the daemon at `url` (its http URL) with the bearer token. */
  static connect(url: string, token: string, options: ConnectOptions = {}): Promise<RpcClient> {
    const wsUrl = `${url.replace(/^http/, 'ws')}/rpc`;
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(wsUrl, {
        headers: { authorization: `Bearer ${token}` },
        handshakeTimeout: options.timeoutMs ?? 5_000,
        maxPayload: 256 * 1024 * 1024,
      });
      socket.once('unexpected-response', (_request, response) => {
        reject(new LightningError(`the daemon at ${url} refused the connection (HTTP ${response.statusCode})`));
        socket.terminate();
      });
      socket.once('error', (error) =>
        reject(new LightningError(`cannot reach the daemon at ${url}: ${error.message}`)),
      );
      socket.once('open', () => {
        const connection = createMessageConnection(
          new WebSocketMessageReader(socket),
          new WebSocketMessageWriter(socket),
        );
        connection.listen();
        resolve(new RpcClient(socket, connection));
      });
    });
  }

  async request<M extends MethodName>(name: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    const checked = checkParams(name, params);
    if (!checked.ok) throw new InvalidInputError(checked.message);
    let raw: unknown;
    try {
      raw = await this.connection.sendRequest(Methods[name].method, params);
    } catch (error) {
      if (error instanceof ResponseError) throw fromResponseError(error.message, error.code, error.data);
      throw error;
    }
    const result = checkResult(name, raw);
    if (!result.ok) throw new LightningError(result.message);
    return result.value;
  }

  /** Sends a request without validating params: for tests of the server's own validation. */
  requestRaw(method: string, params: unknown): Promise<unknown> {
    return this.connection.sendRequest(method, params);
  }

  onNotification<N extends NotificationName>(name: N, listener: (params: NotificationParamsOf<N>) => void): Disposable {
    return onCheckedNotification(this.connection, name, listener);
  }

  /** Whether the connection is gone (the daemon stopped or died): requests on it can only fail. */
  get closed(): boolean {
    return this.socket.readyState !== WebSocket.OPEN;
  }

  dispose(): void {
    this.connection.dispose();
    this.socket.close();
  }
}
