/**
 * The editor-facing JSON-RPC server: WebSocket on `/rpc` of the daemon's HTTP server, one
 * vscode-jsonrpc message connection per socket (the same framing the clients use,
 * `protocol/node/connection.ts`). The upgrade needs the bearer token; browsers (any request with an Origin) are
 * refused; frames are capped in size. Every request is validated against its schema before any
 * handler runs, so a bad request changes nothing; a request reusing a pending one's id is refused (requestIds.ts).
 */
import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { createMessageConnection, ResponseError, type MessageConnection } from 'vscode-jsonrpc/node';
import { WebSocketServer, type WebSocket } from 'ws';
import { Methods, Notifications, type MethodName } from '../protocol';
import { errorMessage, mapError, RpcCode } from '../protocol/errors';
import type { Logger } from '../log';
import { markKeyed } from '../server/connectionSlots';
import { Emitter, type Disposable } from '../protocol/event';
import { invoke, type Handlers } from './handlers';
import { PendingRequestIds, UniqueIdReader, UniqueIdWriter } from './requestIds';
import type { Broadcast } from './notifier';

export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Unsent bytes one RPC client may leave waiting before it is disconnected (a client that stopped reading). */
export const DEFAULT_MAX_BUFFERED_BYTES = 64 * 1024 * 1024;

export interface RpcServerOptions {
  readonly token: string;
  readonly handlers: Handlers;
  readonly logger: Logger;
  readonly maxMessageBytes?: number;
  /** Bytes queued to a slow client before it is dropped (default DEFAULT_MAX_BUFFERED_BYTES; see limits.ts). */
  readonly maxBufferedBytes?: number;
}

function tokenMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer (.+)$/i.exec(header ?? '');
  if (!match) return false;
  const given = Buffer.from(match[1]!);
  const expected = Buffer.from(token);
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}

function refuseUpgrade(socket: Duplex, status: number, reason: string): void {
  const body = JSON.stringify({ error: reason });
  socket.end(
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Forbidden'}\r\n` +
      'Content-Type: application/json\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

export class RpcServer implements Disposable {
  private readonly wss: WebSocketServer;
  private readonly connections = new Set<MessageConnection>();
  private readonly _onDidChangeConnections = new Emitter<number>();
  /** Fires with the new count each time an editor or CLI client connects or goes. */
  readonly onDidChangeConnections = this._onDidChangeConnections.event;

  constructor(private readonly options: RpcServerOptions) {
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    });
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Called by the HTTP server for `GET /rpc` upgrades (Host already checked). */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (request.headers.origin !== undefined) {
      this.options.logger.warn('refused an RPC connection from a browser origin', { origin: request.headers.origin });
      refuseUpgrade(socket, 403, 'connections from web pages are not accepted');
      return;
    }
    if (!tokenMatches(request.headers.authorization, this.options.token)) {
      this.options.logger.warn('refused an RPC connection without a valid bearer token');
      refuseUpgrade(socket, 401, 'a valid bearer token is required (see the ready line or .lightning/daemon.token)');
      return;
    }
    // The editor's connection: never closed to make room for anonymous ones.
    markKeyed(request);
    this.wss.handleUpgrade(request, socket, head, (ws) => this.accept(ws));
  }

  private accept(ws: WebSocket): void {
    const ids = new PendingRequestIds();
    const reader = new UniqueIdReader(ws, ids, (_raw, reason) => {
      ws.send(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: RpcCode.ParseError, message: reason } }));
    });
    const maxBuffered = this.options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
    const writer = new UniqueIdWriter(ws, ids, maxBuffered);
    writer.onError(([error]) => this.options.logger.warn('dropped an RPC client', { error: errorMessage(error) }));
    const connection = createMessageConnection(reader, writer);
    for (const name of Object.keys(Methods) as MethodName[]) {
      connection.onRequest(Methods[name].method, (raw: unknown) => this.serve(name, raw));
    }
    connection.onClose(() => {
      if (!this.connections.delete(connection)) return;
      connection.dispose();
      this._onDidChangeConnections.fire(this.connections.size);
    });
    ws.on('error', (error) => this.options.logger.warn('RPC socket error', { error }));
    this.connections.add(connection);
    connection.listen();
    this._onDidChangeConnections.fire(this.connections.size);
  }

  private async serve(name: MethodName, raw: unknown): Promise<unknown> {
    try {
      return await invoke(this.options.handlers, name, raw);
    } catch (error) {
      const mapping = mapError(error);
      if (mapping.rpcCode === RpcCode.InternalError) {
        this.options.logger.error('RPC method failed', { method: Methods[name].method, error });
      }
      throw new ResponseError(mapping.rpcCode, errorMessage(error), { kind: mapping.kind });
    }
  }

  readonly broadcast: Broadcast = (name, params) => {
    const method = Notifications[name].method;
    for (const connection of this.connections) {
      connection.sendNotification(method, params).catch(() => {
        // The socket closed between the flush and the send: that client is gone; nothing to keep.
      });
    }
  };

  dispose(): void {
    this._onDidChangeConnections.dispose();
    for (const connection of this.connections) connection.dispose();
    this.connections.clear();
    for (const client of this.wss.clients) client.close(1001, 'daemon shutting down');
    this.wss.close();
  }
}
