/**
 * Fair connection slots (docs/guarantees.md). The daemon holds at most `cap` client connections, so slow or
 * idle clients can never exhaust its file descriptors; but a plain cap lets whoever fills it first keep every
 * one else out — a slow-loris re-opening its connections held it against agents and the editor alike.
 *
 * A connection is anonymous until one of its requests proves a credential: a live rollout key (`/r/<key>`,
 * `/b/<key>`, OTLP's key header) or the daemon's token (the RPC upgrade, OTLP's bearer). Anonymous connections
 * share a budget of their own, `cap - reserve`; a keyed one is never closed to make room.
 *
 * A connection that finds no room is not refused: it waits its turn, parked — accepted but not read (the
 * listener pauses new sockets), in order of arrival, up to `parkCap` of them. Every few milliseconds room is made
 * for the parked ones, in that order, by closing the oldest anonymous connections with no request in progress
 * (one still sending its headers, one idle between requests; one that has sent nothing only after a grace
 * second, the time a newcomer has to send its request). A keyed caller thus waits behind at most the parked
 * connections that came before it, and keeps its slot once its first request proved it. Only past `parkCap`
 * waiting is a newcomer closed at once.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

interface Held {
  readonly socket: Socket;
  keyed: boolean;
  /** When it was admitted (ms). */
  readonly since: number;
  /** Requests read and not yet answered. */
  busy: number;
}

interface Parked {
  readonly socket: Socket;
  readonly since: number;
  readonly admit: () => void;
}

/** What happened to a connection, for the server's (rate-limited) log. */
export type SlotEvent = 'parked' | 'refused' | 'evicted' | 'expired';

/**
 * How long an admitted connection that has sent nothing is safe from being closed for room: the time a client
 * has to get its request to the daemon.
 */
const SILENT_GRACE_MS = 1_000;
/** How often room is made for parked connections while any wait. */
const PUMP_MS = 10;

/** The slots of the server a socket belongs to: requests reach their slot through their socket. */
const bySocket = new WeakMap<Socket, ConnectionSlots>();

/**
 * Marks the request's connection as keyed (it proved a credential): it is never closed to make room for
 * another. Called where the credential is checked; a no-op for a socket no slots track.
 */
export function markKeyed(request: IncomingMessage): void {
  const socket = request.socket as Socket | null;
  if (socket) bySocket.get(socket)?.markKeyed(socket);
}

/** The reserve kept from anonymous connections: a quarter of the cap, at least 4, at most half. */
export function reserveFor(cap: number): number {
  return Math.min(Math.floor(cap / 2), Math.max(4, Math.floor(cap / 4)));
}

export interface ConnectionSlotsOptions {
  readonly cap: number;
  /** How many connections may wait for room (default: `cap`). */
  readonly parkCap?: number;
  /** How long one may wait before it is closed (the headers timeout: it would have had its headers read by then). */
  readonly parkTimeoutMs: number;
  /** How long an admitted connection that has sent nothing is safe from being closed for room (default 1 s). */
  readonly silentGraceMs?: number;
  readonly onEvent?: (event: SlotEvent) => void;
}

export class ConnectionSlots {
  /** Anonymous connections, oldest first (a Set keeps insertion order). */
  private readonly anonymous = new Set<Held>();
  private readonly held = new Map<Socket, Held>();
  private readonly parked: Parked[] = [];
  private keyedCount = 0;
  private pumpTimer: NodeJS.Timeout | undefined;
  readonly cap: number;
  readonly anonymousBudget: number;
  readonly parkCap: number;

  constructor(private readonly options: ConnectionSlotsOptions) {
    this.cap = options.cap;
    this.anonymousBudget = Math.max(1, options.cap - reserveFor(options.cap));
    this.parkCap = options.parkCap ?? options.cap;
  }

  get size(): number {
    return this.held.size;
  }

  get keyed(): number {
    return this.keyedCount;
  }

  get waiting(): number {
    return this.parked.length;
  }

  /**
   * A connection was accepted (paused): `admit` hands it to the HTTP server now if there is room, else once its
   * turn comes; past the parking cap it is closed.
   */
  arrive(socket: Socket, admit: () => void): void {
    if (this.parked.length === 0 && this.hasRoom()) {
      this.hold(socket, admit);
      return;
    }
    if (this.parked.length >= this.parkCap) {
      socket.destroy();
      this.options.onEvent?.('refused');
      return;
    }
    this.parked.push({ socket, since: Date.now(), admit });
    this.options.onEvent?.('parked');
    this.schedulePump();
  }

  markKeyed(socket: Socket): void {
    const held = this.held.get(socket);
    if (!held || held.keyed) return;
    held.keyed = true;
    this.anonymous.delete(held);
    this.keyedCount += 1;
  }

  /** A request on the socket was read: its connection is not idle until it is answered. */
  requestStarted(socket: Socket): void {
    const held = this.held.get(socket);
    if (held) held.busy += 1;
  }

  requestEnded(socket: Socket): void {
    const held = this.held.get(socket);
    if (held && held.busy > 0) held.busy -= 1;
  }

  /** Stops making room (the server is closing); parked connections are closed. */
  close(): void {
    clearTimeout(this.pumpTimer);
    this.pumpTimer = undefined;
    for (const parked of this.parked.splice(0)) parked.socket.destroy();
  }

  private hasRoom(): boolean {
    return this.held.size < this.cap && this.anonymous.size < this.anonymousBudget;
  }

  private hold(socket: Socket, admit: () => void): void {
    const held: Held = { socket, keyed: false, since: Date.now(), busy: 0 };
    this.held.set(socket, held);
    this.anonymous.add(held);
    bySocket.set(socket, this);
    socket.once('close', () => {
      this.release(held);
      if (this.parked.length > 0) this.schedulePump();
    });
    admit();
  }

  private schedulePump(): void {
    this.pumpTimer ??= setTimeout(() => {
      this.pumpTimer = undefined;
      this.pump();
    }, PUMP_MS).unref();
  }

  /** Admits parked connections in order, closing idle anonymous ones for them; the rest wait for the next turn. */
  private pump(): void {
    const expiredBefore = Date.now() - this.options.parkTimeoutMs;
    while (this.parked.length > 0) {
      const next = this.parked[0]!;
      if (next.socket.destroyed || next.since < expiredBefore) {
        this.parked.shift();
        if (!next.socket.destroyed) {
          next.socket.destroy();
          this.options.onEvent?.('expired');
        }
        continue;
      }
      if (!this.hasRoom()) {
        if (!this.evictOldestIdle()) break;
        this.options.onEvent?.('evicted');
        continue;
      }
      this.parked.shift();
      this.hold(next.socket, next.admit);
    }
    if (this.parked.length > 0) this.schedulePump();
  }

  /**
   * Closes the oldest anonymous connection with no request in progress; one that has sent nothing yet only after
   * the grace (it is most likely about to send its whole request, and a keyed caller proves itself in that).
   */
  private evictOldestIdle(): boolean {
    const silentSince = Date.now() - (this.options.silentGraceMs ?? SILENT_GRACE_MS);
    for (const held of this.anonymous) {
      if (held.busy > 0 || (held.socket.bytesRead === 0 && held.since > silentSince)) continue;
      this.release(held);
      held.socket.destroy();
      return true;
    }
    return false;
  }

  private release(held: Held): void {
    if (this.held.get(held.socket) !== held) return;
    this.held.delete(held.socket);
    if (held.keyed) this.keyedCount -= 1;
    else this.anonymous.delete(held);
  }
}
