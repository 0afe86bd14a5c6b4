/**
 * An agent request's body, read within limits: a byte cap checked as data arrives, the daemon's in-flight byte budget,
 * and a JSON media type and object (agentRoutes.ts reads every body through these).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Json } from '../protocol';
import { errorMessage, InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../protocol/errors';
import type { ByteBudget } from './byteBudget';

/** Requests whose unread remainder must not be drained: their connection closes after the answer. */
const closeAfterResponse = new WeakSet<IncomingMessage>();

/** The in-flight byte budget of the daemon's agent routes, by request (set by accountBody). */
const budgets = new WeakMap<IncomingMessage, { budget: ByteBudget; response: ServerResponse }>();

/**
 * A refused request's remainder is read off and dropped (nothing of it held), so that its client, still sending,
 * finishes and reads the refusal on a connection that stays usable. Closing a connection with bytes unread resets it,
 * and the client may never see the answer: 1–2 of 40 fetch() calls refused for the budget (8 MiB bodies) failed with
 * EPIPE instead of their 503, measured here. Past DRAIN_MAX_BYTES, or when the rest has not come within DRAIN_MS (a
 * chunked body may never end), the connection is closed after all.
 */
const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
const DRAIN_MS = 5_000;

/**
 * Stops keeping `request`'s body: what is left of it is dropped as it comes (within DRAIN_MAX_BYTES and DRAIN_MS). When
 * more than that is still declared (`unread`: 0 or less without a Content-Length), or the request has no budget record
 * (accountBody, which every agent route calls), nothing more is read and the answer closes the connection.
 */
function dropRest(request: IncomingMessage, unread: number): void {
  request.removeAllListeners('data');
  const response = budgets.get(request)?.response;
  if (!response || unread > DRAIN_MAX_BYTES) {
    request.pause();
    closeAfterResponse.add(request);
    return;
  }
  let dropped = 0;
  const cut = (): void => {
    request.removeAllListeners('data');
    request.pause();
    // Not answered yet: the answer closes the connection. Answered: the connection is destroyed now, and a client still
    // sending may see a reset rather than the answer (the bound's price).
    if (response.headersSent) request.socket.destroy();
    else closeAfterResponse.add(request);
  };
  const timer = setTimeout(cut, DRAIN_MS);
  timer.unref();
  request.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > DRAIN_MAX_BYTES) {
      clearTimeout(timer);
      cut();
    }
  });
  request.once('close', () => clearTimeout(timer));
  request.resume();
}

/**
 * Reads a request body up to `limit` bytes; past it, rejects with PayloadTooLargeError (413). The
 * bytes count against the daemon's in-flight budget until the response closes; past the budget,
 * rejects with OverloadedError (503, retryable).
 */
export function readBody(request: IncomingMessage, limit: number): Promise<Buffer> {
  const accounting = budgets.get(request);
  return new Promise((resolve, reject) => {
    const declared = Number(request.headers['content-length'] ?? 0);
    if (declared > limit) {
      reject(new PayloadTooLargeError(`the request body (${declared} bytes) is over the ${limit}-byte limit`));
      dropRest(request, declared);
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      try {
        accounting?.budget.take(chunk.length, accounting.response);
      } catch (error) {
        chunks.length = 0;
        dropRest(request, declared - size);
        reject(error);
        return;
      }
      if (size > limit) {
        chunks.length = 0;
        dropRest(request, declared - size);
        reject(new PayloadTooLargeError(`the request body is over the ${limit}-byte limit`));
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks)));
    request.on('error', reject);
  });
}

/** Counts what `request`'s body holds against `budget` until `response` closes (readBody takes from it). */
export function accountBody(request: IncomingMessage, budget: ByteBudget, response: ServerResponse): void {
  budgets.set(request, { budget, response });
}

/**
 * Whether `request`'s connection closes after the answer: a refused body whose rest was too large to read off, or whose
 * reading off was cut (dropRest).
 */
export function closesAfterResponse(request: IncomingMessage): boolean {
  return closeAfterResponse.has(request);
}

/** The body as a JSON object, refused unless its content type is exactly JSON. */
export function parseJsonBody(request: IncomingMessage, body: Buffer): { [key: string]: Json } {
  const type = String(request.headers['content-type'] ?? '');
  // Exactly a JSON media type: `text/plain;charset=json` is what a web page can send without a CORS
  // preflight, and it must not drive the proxy or /reward with a rollout key it learned.
  const media = type.split(';')[0]!.trim().toLowerCase();
  if (media !== 'application/json' && !/^application\/[a-z0-9.+-]+\+json$/.test(media)) {
    throw new UnsupportedMediaTypeError(
      `expected a JSON body (content-type application/json), got ${type ? JSON.stringify(type.slice(0, 100)) : 'no content-type'}`,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (error) {
    // V8's message quotes the body around the fault, which may hold a prompt or a key: keep only where.
    const where = /position \d+|line \d+ column \d+/.exec(errorMessage(error))?.[0];
    throw new InvalidInputError(`the request body is not valid JSON${where ? ` (at ${where})` : ''}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new InvalidInputError('the request body must be a JSON object');
  return parsed as { [key: string]: Json };
}
