/**
 * A typed JSON-RPC client for the daemon over WebSocket, for Node programs (the CLI, tests,
 * benchmarks). Params are checked before sending and results after receiving, with the same
 * schemas the server uses. The extension speaks the same protocol through vscode-languageclient.
 */
import { createMessageConnection, ResponseError, type MessageConnection } from 'vscode-jsonrpc/node';
import WebSocket from 'ws';
import {
  Methods,
  Notifications,
  describeIssues,
  type MethodName,
  type NotificationName,
  type NotificationParamsOf,
  type ParamsOf,
  type ResultOf,
} from '../protocol';
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
    const spec = Methods[name];
    const checked = spec.params.safeParse(params);
    if (!checked.success) throw new InvalidInputError(describeIssues(checked.error, 'params'));
    let raw: unknown;
    try {
      raw = await this.connection.sendRequest(spec.method, params);
    } catch (error) {
      if (error instanceof ResponseError) {
        const kind = (error.data as { kind?: unknown } | undefined)?.kind;
        throw new RpcError(error.message, error.code, typeof kind === 'string' ? kind : 'internal');
      }
      throw error;
    }
    const result = spec.result.safeParse(raw);
    if (!result.success) throw new LightningError(`the daemon sent an invalid ${spec.method} result: ${describeIssues(result.error, 'result')}`);
    return result.data as ResultOf<M>;
  }

  /** Sends a request without validating params: for tests of the server's own validation. */
  requestRaw(method: string, params: unknown): Promise<unknown> {
    return this.connection.sendRequest(method, params);
  }

  onNotification<N extends NotificationName>(name: N, listener: (params: NotificationParamsOf<N>) => void): Disposable {
    const spec = Notifications[name];
    return this.connection.onNotification(spec.method, (raw: unknown) => {
      const parsed = spec.params.safeParse(raw);
      if (parsed.success) listener(parsed.data as NotificationParamsOf<N>);
    });
  }


  dispose(): void {
    this.connection.dispose();
    this.socket.close();
  }
}
