/**
 * A JSON POST whose answer may take as long as its caller allows: Node's `fetch` gives up on an answer whose headers
 * take over 300 s (undici's `headersTimeout`), whatever signal it is given, and says only "fetch failed". A policy
 * server answers a non-streamed call's headers when the whole answer is ready, and a reasoning model behind the proxy
 * can take longer: the daemon's own calls (translated calls to the policy server, APO's optimizer) wait until their
 * `signal` says stop. The answer is read up to `maxBytes` (BodyOverLimitError past it). Keep-alive sockets are shared;
 * a pooled socket the server had closed, failing before any answer byte, is retried once on a new connection.
 */
import http from 'node:http';
import https from 'node:https';
import { BodyOverLimitError } from './boundedBody';

const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: 256 }),
  https: new https.Agent({ keepAlive: true, maxSockets: 256 }),
};

export interface PostOptions {
  readonly headers?: http.OutgoingHttpHeaders;
  /** Stops the request (a client that left, a timeout): the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal;
  readonly maxBytes: number;
}

export interface Posted {
  readonly status: number;
  readonly text: string;
}

export function postJson(url: string, body: string, options: PostOptions): Promise<Posted> {
  return send(new URL(url), Buffer.from(body), options, false);
}

function send(target: URL, body: Buffer, options: PostOptions, fresh: boolean): Promise<Posted> {
  const { signal, maxBytes } = options;
  return new Promise<Posted>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      return;
    }
    const secure = target.protocol === 'https:';
    const request = (secure ? https : http).request(target, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...options.headers, 'content-length': body.length },
      agent: fresh ? false : secure ? agents.https : agents.http,
    });
    const abort = (): void => {
      request.destroy(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
    };
    signal?.addEventListener('abort', abort, { once: true });
    const done = (): void => signal?.removeEventListener('abort', abort);
    let answered = false;
    request.on('error', (error) => {
      done();
      if (!answered && !fresh && request.reusedSocket && !signal?.aborted) {
        send(target, body, options, true).then(resolve, reject);
        return;
      }
      reject(error);
    });
    request.on('response', (response) => {
      answered = true;
      const declared = Number(response.headers['content-length'] ?? Number.NaN);
      if (declared > maxBytes) {
        request.destroy(new BodyOverLimitError(maxBytes));
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxBytes) request.destroy(new BodyOverLimitError(maxBytes));
        else chunks.push(chunk);
      });
      response.on('error', (error) => {
        done();
        reject(error);
      });
      response.on('end', () => {
        done();
        resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
      });
    });
    request.end(body);
  });
}
