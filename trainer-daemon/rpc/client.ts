/**
 * A typed JSON-RPC client for the daemon over WebSocket, for Node programs (the CLI, tests,
 * benchmarks). Params are checked before sending and results after receiving, with the same
 * schemas the server uses. The extension speaks the same protocol through vscode-languageclient.
 */
import { createMessageConnection, ResponseError, type MessageConnection } from 'vscode-jsonrpc/node';
import WebSocket from 'ws';
import { Methods, type MethodName, type NotificationName, type NotificationParamsOf, type ParamsOf, type ResultOf } from '../protocol';
import { checkParams, checkResult, onCheckedNotification } from '../protocol/typedRpc';
import { WebSocketMessageReader, WebSocketMessageWriter } from '../protocol/wsTransport';
import { InvalidInputError, LightningError } from '../errors';
import type { Disposable } from '../util/event';

/** An error the daemon answered with; `kind` is the stable name from the error mapping. */
export class RpcError extends LightningError {
  constructor(
    message: string,
    readonly code: number,
    readonly kind: string,
  ) {
    super(message);
  }
}

export class RpcClient implements Disposable {
  private constructor(
    private readonly socket: WebSocket,
    private readonly connection: MessageConnection,
  ) {}

  /** Connects to `ws://…/rpc` of the daemon at `url` (its http URL) with the bearer token. */
  static connect(url: string, token: string, options: { timeoutMs?: number } = {}): Promise<RpcClient> {
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
      socket.once('error', (error) => reject(new LightningError(`cannot reach the daemon at ${url}: ${error.message}`)));
      socket.once('open', () => {
        const connection = createMessageConnection(new WebSocketMessageReader(socket), new WebSocketMessageWriter(socket));
        // When the daemon goes away, fail every pending request instead of leaving it unanswered.
        socket.once('close', () => connection.dispose());
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
      if (error instanceof ResponseError) {
        const kind = (error.data as { kind?: unknown } | undefined)?.kind;
        throw new RpcError(error.message, error.code, typeof kind === 'string' ? kind : 'internal');
      }
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
