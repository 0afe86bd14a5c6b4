/**
 * The daemon's one HTTP server (one port for everything): the RPC WebSocket upgrade on `/rpc`,
 * `GET /health`, and the agent-facing routes. Every request must name a loopback Host
 * (DNS-rebinding defence): a page on another origin that resolves to 127.0.0.1 is refused.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorMessage } from '../protocol/errors';
import type { Logger } from '../log';
import { ConnectionSlots, type SlotEvent } from './connectionSlots';

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/**
 * Whether a Host header names this daemon: a loopback name with its port, or, when it also listens
 * for agents on another machine's reach (`lightning serve --host 10.0.0.5`), that address and port.
 */
export function isLoopbackHost(
  hostHeader: string | undefined,
  port: number,
  agents?: { readonly host: string; readonly port: number },
): boolean {
  if (!hostHeader) return false;
  const match = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader.toLowerCase());
  if (!match) return false;
  const name = match[1]!;
  const at = Number(match[2] ?? 80);
  if (LOOPBACK_HOSTS.has(name) && at === port) return true;
  return agents !== undefined && name === bracketed(agents.host).toLowerCase() && at === agents.port;
}

const bracketed = (host: string): string => (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host);

/**
 * The path of an origin-form request target (`/a/b?c`), without WHATWG URL parsing: a target
 * such as `//[::1/` is not a URL and must not throw in the request listener. Undefined for any
 * other form (absolute, authority, asterisk), which the daemon does not serve.
 */
export function requestPath(target: string | undefined): { pathname: string; search: string } | undefined {
  if (!target || !target.startsWith('/') || target.startsWith('//')) return undefined;
  const query = target.indexOf('?');
  return query === -1
    ? { pathname: target, search: '' }
    : { pathname: target.slice(0, query), search: target.slice(query) };
}

const requestIds = new WeakMap<IncomingMessage, string>();

/**
 * The id the daemon gave a request: sent back as `x-request-id` (a proxied answer carries the upstream's own
 * instead) and as `request_id` in the daemon's JSON error bodies, and in every log line about the request.
 */
export function requestIdOf(request: IncomingMessage): string {
  let id = requestIds.get(request);
  if (id === undefined) {
    id = `req_${crypto.randomBytes(9).toString('base64url')}`;
    requestIds.set(request, id);
  }
  return id;
}

/** The request's path as a log line shows it: no query, and no capability key (`/r/…`, `/b/…`). */
export function loggedPath(request: IncomingMessage): string {
  const path = requestPath(request.url)?.pathname ?? '(not a path)';
  return path.replace(/^\/([rb])\/[^/]+/, '/$1/…').slice(0, 200);
}

export type UpgradeHandler = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: http.OutgoingHttpHeaders = {},
): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

/** The process's soft limit on open files (Linux /proc), or undefined where it cannot be read. */
function openFileLimit(): number | undefined {
  try {
    const line = /^Max open files\s+(\d+)/m.exec(fs.readFileSync('/proc/self/limits', 'utf8'));
    return line ? Number(line[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * How many client connections the daemon holds at once unless LIGHTNING_MAX_CONNECTIONS says (docs/guarantees.md;
 * limits.ts). Each proxied call also holds an upstream socket, as many again may wait for a slot
 * (connectionSlots.ts), and the store, logs and workers need descriptors too: a third of what is left of the fd
 * limit after a reserve, so slow or idle clients can never exhaust descriptors and make every other request fail.
 */
export function defaultConnectionCap(): number {
  const limit = openFileLimit();
  return limit === undefined ? 4_096 : Math.max(32, Math.floor((limit - 128) / 3));
}

export interface HttpServerOptions {
  readonly logger: Logger;
  /** How long a client may take to send a request's headers (default 10 s; the daemon's: limits.ts). */
  readonly headersTimeoutMs?: number;
  /** Client connections held at once on each listener (default: defaultConnectionCap; the daemon's: limits.ts). */
  readonly maxConnections?: number;
  readonly routes: (request: IncomingMessage, response: ServerResponse) => boolean;
  readonly upgrades: Record<string, UpgradeHandler>;
}

export class DaemonHttpServer {
  private readonly server: http.Server;
  private boundPort = 0;
  /** The agents' listener (`listenForAgents`): the agent-facing routes only, never the RPC. */
  private agentServer: http.Server | undefined;
  private agentAddress: { host: string; port: number } | undefined;
  private stopping = false;
  private inFlight = 0;
  private idleWaiters: Array<() => void> = [];
  private lastSlotLog = 0;
  private readonly slots: ConnectionSlots[] = [];

  constructor(private readonly options: HttpServerOptions) {
    this.server = this.createServer();
    this.server.on('upgrade', (request, socket, head) =>
      this.guard(
        request,
        () => this.onUpgrade(request, socket, head),
        () =>
          socket.end(
            `HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nx-request-id: ${requestIdOf(request)}\r\nContent-Length: 0\r\n\r\n`,
            () => socket.destroy(),
          ),
      ),
    );
    // Malformed HTTP: a 400 the client can read, then close (Node's recommended handling).
    this.server.on('clientError', (error: NodeJS.ErrnoException, socket) => {
      if (!socket.writable || error.code === 'ECONNRESET') {
        socket.destroy();
        return;
      }
      const status = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
      socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`, () => socket.destroy());
    });
  }

  /**
   * A server with the daemon's timeouts and fair connection slots: a client must send its headers
   * within headersTimeout (a byte a second never completes them); an idle keep-alive socket closes
   * after 5 s; the check runs every second. Each listener has slots of its own.
   */
  private createServer(): http.Server {
    const headersTimeout = this.options.headersTimeoutMs ?? 10_000;
    const slots = new ConnectionSlots({
      cap: this.options.maxConnections ?? defaultConnectionCap(),
      parkTimeoutMs: headersTimeout,
      onEvent: (event) => this.logSlots(slots, event),
    });
    this.slots.push(slots);
    const server = http.createServer(
      {
        headersTimeout,
        requestTimeout: 300_000,
        keepAliveTimeout: 5_000,
        connectionsCheckingInterval: Math.min(1_000, headersTimeout),
      },
      (request, response) => {
        slots.requestStarted(request.socket);
        response.once('close', () => slots.requestEnded(request.socket));
        response.setHeader('x-request-id', requestIdOf(request));
        this.guard(
          request,
          () => this.onRequest(request, response),
          () => {
            if (response.headersSent) return void response.destroy();
            sendJson(
              response,
              500,
              {
                error: {
                  message: `Lightning failed on this request (an internal error, logged with request id ${requestIdOf(request)}); retry, and report the id if it repeats`,
                  type: 'internal',
                },
                request_id: requestIdOf(request),
              },
              { connection: 'close' },
            );
          },
        );
      },
    );
    // Not server.maxConnections, which drops whoever comes once the cap is full: new sockets arrive paused
    // (net.Server's pauseOnConnect), and the slots hand each to the HTTP server's own connection listener — the
    // only one at this point — when its turn comes (connectionSlots.ts).
    const [httpConnection] = server.listeners('connection') as Array<(socket: Socket) => void>;
    if (!httpConnection) throw new Error('the HTTP server has no connection listener to hand sockets to');
    server.removeAllListeners('connection');
    (server as http.Server & { pauseOnConnect: boolean }).pauseOnConnect = true;
    server.on('connection', (socket: Socket) =>
      slots.arrive(socket, () => {
        httpConnection.call(server, socket);
        socket.resume();
      }),
    );
    return server;
  }

  /** At most one line every 10 s while the cap is pressed: a slow-loris must not flood the log either. */
  private logSlots(slots: ConnectionSlots, event: SlotEvent): void {
    if (Date.now() - this.lastSlotLog < 10_000) return;
    this.lastSlotLog = Date.now();
    this.options.logger.warn(
      event === 'refused'
        ? 'refused a connection: the connection cap is reached and as many again wait for a slot'
        : 'connections wait for a slot: the connection cap or the anonymous budget is reached; idle anonymous connections are closed for them',
      {
        maxConnections: slots.cap,
        anonymousBudget: slots.anonymousBudget,
        keyed: slots.keyed,
        open: slots.size,
        waiting: slots.waiting,
      },
    );
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

  /**
   * Also listens on `host` (an address other machines reach) for the agent-facing routes only: the
   * WebSocket RPC stays on loopback. The port is the loopback one when it is free there, else any.
   * Returns the base URL agents get (`http://HOST:PORT`).
   */
  async listenForAgents(host: string): Promise<string> {
    const server = this.createServer();
    server.on('clientError', (_error, socket) => socket.destroy());
    // No 'upgrade' listener: an RPC upgrade on this address is dropped.
    const listen = (port: number): Promise<AddressInfo> =>
      new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server.address() as AddressInfo);
        });
      });
    const address = await listen(this.boundPort).catch(() => listen(0));
    this.agentServer = server;
    this.agentAddress = { host: address.address, port: address.port };
    return `http://${bracketed(address.address)}:${address.port}`;
  }

  /** A handler that throws must never take the daemon down: that request fails (500), logged with its id. */
  private guard(request: IncomingMessage, handle: () => void, fail: () => void): void {
    try {
      handle();
    } catch (error) {
      this.options.logger.error('request handler failed', {
        requestId: requestIdOf(request),
        method: request.method,
        path: loggedPath(request),
        error: errorMessage(error),
      });
      try {
        fail();
      } catch {
        request.socket.destroy();
      }
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
    if (!isLoopbackHost(request.headers.host, this.boundPort, this.agentAddress)) {
      sendJson(response, 403, {
        error: `Host ${request.headers.host ?? '(none)'} is not this daemon's address`,
        request_id: requestIdOf(request),
      });
      return;
    }
    const target = requestPath(request.url);
    if (!target) {
      sendJson(response, 400, {
        error: 'the request target must be a path starting with a single /',
        request_id: requestIdOf(request),
      });
      return;
    }
    if (request.method === 'GET' && target.pathname === '/health') {
      sendJson(response, 200, { ok: true });
      return;
    }
    if (this.options.routes(request, response)) return;
    sendJson(response, 404, {
      error: `no route for ${request.method} ${target.pathname}`,
      request_id: requestIdOf(request),
    });
  }

  private onUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    const target = requestPath(request.url);
    const handler =
      target && Object.hasOwn(this.options.upgrades, target.pathname)
        ? this.options.upgrades[target.pathname]
        : undefined;
    if (this.stopping || !isLoopbackHost(request.headers.host, this.boundPort) || !handler) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    handler(request, socket, head);
  }

  /** Stops accepting connections; resolves once the requests in flight have been answered (or after `timeoutMs`). */
  async drain(timeoutMs: number): Promise<void> {
    this.stopping = true;
    for (const slots of this.slots) slots.close();
    this.server.close();
    this.server.closeIdleConnections();
    this.agentServer?.close();
    this.agentServer?.closeIdleConnections();
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
    for (const slots of this.slots) slots.close();
    this.server.close();
    this.server.closeAllConnections();
    this.agentServer?.close();
    this.agentServer?.closeAllConnections();
  }
}
