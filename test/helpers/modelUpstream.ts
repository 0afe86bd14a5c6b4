/**
 * A scripted upstream whose answer is chosen by the request's model name, and a daemon in front of it for one describe
 * block's tests: for the proxy's handling of answers at the byte level (test/integration/hardeningUpstream.test.ts,
 * tokenCap.test.ts).
 */
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { after, before } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import type { Span } from '../../trainer-daemon/protocol';
import { startDaemon, type RunningDaemon } from './daemon';
import { tempDir, waitFor } from './tmp';

export type Handler = (model: string, request: http.IncomingMessage, response: http.ServerResponse) => void;

/** An upstream whose behaviour is chosen by the request's model name. */
export function upstreamOf(handler: Handler): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((request, response) => {
    let raw = '';
    request.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk));
    request.on('end', () => handler((/"model":"([^"]+)"/.exec(raw) ?? [])[1] ?? '', request, response));
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`,
        close: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      }),
    ),
  );
}

/**
 * A daemon whose upstream answers by `handler`, for one describe block's tests: started before them, stopped after.
 * Read its parts in the tests (they exist once `before` ran).
 */
export function daemonAgainst(handler: Handler): {
  readonly upstream: Awaited<ReturnType<typeof upstreamOf>>;
  readonly daemon: RunningDaemon;
  readonly client: RpcClient;
  spanOf(rolloutId: string): Promise<Span>;
} {
  let parts: { upstream: Awaited<ReturnType<typeof upstreamOf>>; daemon: RunningDaemon; client: RpcClient };
  const cleanups: Array<() => void> = [];
  before(async () => {
    const upstream = await upstreamOf(handler);
    const dir = tempDir({ after: (fn) => cleanups.push(fn) });
    const daemon = await startDaemon(path.join(dir, 'store.db'), ['--upstream', upstream.url]);
    parts = { upstream, daemon, client: await RpcClient.connect(daemon.ready.url, daemon.ready.token) };
  });
  after(async () => {
    parts.client.dispose();
    await parts.daemon.stop();
    await parts.upstream.close();
    for (const cleanup of cleanups) cleanup();
  });
  return {
    get upstream() {
      return parts.upstream;
    },
    get daemon() {
      return parts.daemon;
    },
    get client() {
      return parts.client;
    },
    spanOf: (id) => waitFor(async () => (await parts.client.request('getRollout', { id })).spans[0], 'the call’s span'),
  };
}
