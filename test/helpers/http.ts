/** A plain HTTP POST that resolves with whatever the server answered (also an error status, or a cut-off body). */
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
