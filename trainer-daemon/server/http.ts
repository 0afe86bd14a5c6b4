/**
 * The daemon's one HTTP server (one port for everything): the RPC WebSocket upgrade on `/rpc`,
 * `GET /health`, and, later, the agent-facing routes. Every request must name a loopback Host
 * (DNS-rebinding defence): a page on another origin that resolves to 127.0.0.1 is refused.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log';

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

export function isLoopbackHost(hostHeader: string | undefined, port: number): boolean {
  if (!hostHeader) return false;
  const match = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader.toLowerCase());
  if (!match) return false;
  return LOOPBACK_HOSTS.has(match[1]!) && Number(match[2] ?? 80) === port;
}

export type RouteHandler = (request: IncomingMessage, response: ServerResponse) => void;
export type UpgradeHandler = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;

export function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

export interface HttpServerOptions {
  readonly logger: Logger;
  readonly routes: (request: IncomingMessage, response: ServerResponse) => boolean;
  readonly upgrades: Record<string, UpgradeHandler>;
}

export class DaemonHttpServer {
  private readonly server: http.Server;

  constructor(private readonly options: HttpServerOptions) {
    this.server = http.createServer((request, response) => this.onRequest(request, response));
    this.server.on('upgrade', (request, socket, head) => this.onUpgrade(request, socket, head));
    this.server.on('clientError', (_error, socket) => socket.destroy());
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  private onRequest(request: IncomingMessage, response: ServerResponse): void {
    if (!isLoopbackHost(request.headers.host, this.port)) {
      sendJson(response, 403, { error: `Host ${request.headers.host ?? '(none)'} is not this daemon's loopback address` });
      return;
    }
    const url = new URL(request.url ?? '/', 'http://127.0.0.1');
    if (request.method === 'GET' && url.pathname === '/health') {
      sendJson(response, 200, { ok: true });
      return;
    }
    if (this.options.routes(request, response)) return;
    sendJson(response, 404, { error: `no route for ${request.method} ${url.pathname}` });
  }

  private onUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    const pathname = new URL(request.url ?? '/', 'http://127.0.0.1').pathname;
    const handler = this.options.upgrades[pathname];
    if (!isLoopbackHost(request.headers.host, this.port) || !handler) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    handler(request, socket, head);
  }

  /** Stops accepting connections and closes idle keep-alive ones; resolves when the server is closed. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeIdleConnections();
      setTimeout(() => this.server.closeAllConnections(), 2_000).unref();
    });
  }
}
