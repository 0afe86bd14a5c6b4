/**
 * The daemon's one HTTP server (one port for everything): the RPC WebSocket upgrade on `/rpc`,
 * `GET /health`, and the agent-facing routes. Every request must name a loopback Host
 * (DNS-rebinding defence): a page on another origin that resolves to 127.0.0.1 is refused.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorMessage } from '../protocol/errors';
import type { Logger } from '../log';

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

export function isLoopbackHost(hostHeader: string | undefined, port: number): boolean {
  if (!hostHeader) return false;
  const match = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader.toLowerCase());
  if (!match) return false;
  return LOOPBACK_HOSTS.has(match[1]!) && Number(match[2] ?? 80) === port;
}

/**
 * The path of an origin-form request target (`/a/b?c`), without WHATWG URL parsing: a target
 * such as `//[::1/` is not a URL and must not throw in the request listener. Undefined for any
 * other form (absolute, authority, asterisk), which the daemon does not serve.
 */
export function requestPath(target: string | undefined): { pathname: string; search: string } | undefined {
  if (!target || !target.startsWith('/') || target.startsWith('//')) return undefined;
  const query = target.indexOf('?');
  return query === -1 ? { pathname: target, search: '' } : { pathname: target.slice(0, query), search: target.slice(query) };
}

export type UpgradeHandler = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;

export function sendJson(response: ServerResponse, status: number, body: unknown, headers: http.OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

export interface HttpServerOptions {
  readonly logger: Logger;
  readonly routes: (request: IncomingMessage, response: ServerResponse) => boolean;
  readonly upgrades: Record<string, UpgradeHandler>;
}

export class DaemonHttpServer {
  private readonly server: http.Server;
  private boundPort = 0;
  private stopping = false;
  private inFlight = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(private readonly options: HttpServerOptions) {
    this.server = http.createServer((request, response) => this.guard(request, () => this.onRequest(request, response), () => response.destroy()));
    this.server.on('upgrade', (request, socket, head) => this.guard(request, () => this.onUpgrade(request, socket, head), () => socket.destroy()));
    this.server.on('clientError', (_error, socket) => socket.destroy());
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        const address = this.server.address() as AddressInfo;
        this.boundPort = address.port;
        resolve(address);
      });
    });
  }

  /** A handler that throws must never take the daemon down: log, and drop that one connection. */
  private guard(request: IncomingMessage, handle: () => void, drop: () => void): void {
    try {
      handle();
    } catch (error) {
      this.options.logger.error('request handler failed', { method: request.method, error: errorMessage(error) });
      drop();
    }
  }

  private onRequest(request: IncomingMessage, response: ServerResponse): void {
    this.inFlight += 1;
    response.on('close', () => {
      this.inFlight -= 1;
      if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    });
    // While stopping, answer what is still arriving on open keep-alive sockets, then close them.
    if (this.stopping) response.setHeader('connection', 'close');
    if (!isLoopbackHost(request.headers.host, this.boundPort)) {
      sendJson(response, 403, { error: `Host ${request.headers.host ?? '(none)'} is not this daemon's loopback address` });
      return;
    }
    const target = requestPath(request.url);
    if (!target) {
      sendJson(response, 400, { error: 'the request target must be a path starting with a single /' });
      return;
    }
    if (request.method === 'GET' && target.pathname === '/health') {
      sendJson(response, 200, { ok: true });
      return;
    }
    if (this.options.routes(request, response)) return;
    sendJson(response, 404, { error: `no route for ${request.method} ${target.pathname}` });
  }

  private onUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    const target = requestPath(request.url);
    const handler = target && Object.hasOwn(this.options.upgrades, target.pathname) ? this.options.upgrades[target.pathname] : undefined;
    if (this.stopping || !isLoopbackHost(request.headers.host, this.boundPort) || !handler) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    handler(request, socket, head);
  }

  /** Stops accepting connections; resolves once the requests in flight have been answered (or after `timeoutMs`). */
  async drain(timeoutMs: number): Promise<void> {
    this.stopping = true;
    this.server.close();
    this.server.closeIdleConnections();
    if (this.inFlight === 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref();
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Closes every remaining connection. */
  close(): void {
    this.stopping = true;
    this.server.close();
    this.server.closeAllConnections();
  }
}
