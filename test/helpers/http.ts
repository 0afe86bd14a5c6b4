/** A plain HTTP POST that resolves with whatever the server answered (also an error status, or a cut-off body). */
import assert from 'node:assert/strict';
import http from 'node:http';

export interface PostResult {
  readonly status: number;
  readonly body: string;
  readonly retryAfter: string | undefined;
}

export function post(
  url: string,
  body: string | Buffer,
  headers: Record<string, string> = { 'content-type': 'application/json' },
): Promise<PostResult> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: 'POST', headers }, (response) => {
      let text = '';
      const result = (): PostResult => ({
        status: response.statusCode ?? 0,
        body: text,
        retryAfter: response.headers['retry-after'],
      });
      response.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve(result()));
      response.on('error', () => resolve(result()));
    });
    request.on('error', reject);
    request.end(body);
  });
}

/** Probes /health every 100 ms until stopped; resolves with the slowest answer (ms), or rejects on one over `ms`. */
export function healthProbe(url: string, ms: number): { stop(): Promise<number> } {
  let running = true;
  let worst = 0;
  const loop = (async () => {
    while (running) {
      const started = Date.now();
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(ms) });
      assert.equal(response.status, 200);
      worst = Math.max(worst, Date.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return worst;
  })();
  return {
    stop: () => {
      running = false;
      return loop;
    },
  };
}
