/**
 * How calls reach the rollout without code changes: the Node capture preload's `fetch` routing (only the providers'
 * hosts and the paths the proxy serves, the request otherwise unchanged — method, headers, a streamed body), and
 * where a `/messages` call (`@ai-sdk/anthropic`, whose base ends in `/v1`) goes upstream.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { installFetchRouting, reroutedUrl } from '../../trainer-daemon/capture/fetchRouting';
import { providerPathAt, providerRoute } from '../../trainer-daemon/capture/providerRoutes';

const ROLLOUT = 'http://127.0.0.1:9/r/abcdefghijklmnop';

describe('the capture preload reroutes the providers’ hosts only', () => {
  it('maps each provider host to the rollout URL, path and query kept', () => {
    assert.equal(reroutedUrl('https://api.openai.com/v1/chat/completions', ROLLOUT), `${ROLLOUT}/v1/chat/completions`);
    assert.equal(
      reroutedUrl('https://api.anthropic.com/v1/messages?beta=true', ROLLOUT),
      `${ROLLOUT}/v1/messages?beta=true`,
    );
    assert.equal(
      reroutedUrl('https://api.anthropic.com/v1/messages/count_tokens', ROLLOUT),
      `${ROLLOUT}/v1/messages/count_tokens`,
    );
    const gemini =
      'https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse';
    assert.equal(
      reroutedUrl(gemini, `${ROLLOUT}/`),
      `${ROLLOUT}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse`,
    );
  });

  it('leaves other hosts, other paths (files, uploads, batches), plain http and odd ports alone', () => {
    for (const url of [
      'https://example.com/v1/chat/completions',
      'https://api.openai.com/v1/files',
      'https://api.openai.com/v1/batches',
      'https://generativelanguage.googleapis.com/upload/v1beta/files',
      'https://api.anthropic.com/v1/files',
      'http://api.openai.com/v1/chat/completions',
      'https://api.openai.com:8443/v1/chat/completions',
      'not a url',
    ]) {
      assert.equal(reroutedUrl(url, ROLLOUT), null, url);
    }
  });

  describe('through a real fetch', () => {
    const seen: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string }> = [];
    let server: http.Server;
    let origin = '';
    before(async () => {
      server = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (chunk: Buffer) => chunks.push(chunk));
        req.on('end', () => {
          seen.push({
            method: req.method ?? '',
            url: req.url ?? '',
            headers: req.headers,
            body: Buffer.concat(chunks).toString(),
          });
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"a":1}\n\n');
          res.end('data: [DONE]\n\n');
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    after(() => server.close());

    it('sends a Request with a streamed body and its headers to the rollout, and streams the answer back', async () => {
      const scope: { fetch?: typeof fetch } = { fetch: globalThis.fetch };
      installFetchRouting(scope, `${origin}/r/key`);
      installFetchRouting(scope, `${origin}/r/other`);
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"model":"claude-x",'));
          controller.enqueue(new TextEncoder().encode('"stream":true}'));
          controller.close();
        },
      });
      const request = new Request('https://api.anthropic.com/v1/messages', {
        method: 'POST',
        headers: { 'x-api-key': 'sk-ant-test', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body,
        duplex: 'half',
      });
      const response = await scope.fetch!(request);
      assert.equal(await response.text(), 'data: {"a":1}\n\ndata: [DONE]\n\n');
      const got = seen.at(-1)!;
      assert.deepEqual(
        [got.method, got.url, got.body],
        ['POST', '/r/key/v1/messages', '{"model":"claude-x","stream":true}'],
        'installed once',
      );
      assert.equal(got.headers['x-api-key'], 'sk-ant-test');
      assert.equal(got.headers['anthropic-version'], '2023-06-01');
    });

    it('passes a string URL with its init, and leaves a request to any other host as it was', async () => {
      const scope: { fetch?: typeof fetch } = { fetch: globalThis.fetch };
      installFetchRouting(scope, `${origin}/r/key`);
      const init = { method: 'POST', headers: { 'x-goog-api-key': 'AIza-test' }, body: '{"contents":[]}' };
      await (
        await scope.fetch!('https://generativelanguage.googleapis.com/v1beta/models/g:generateContent', init)
      ).text();
      assert.deepEqual(
        [seen.at(-1)!.url, seen.at(-1)!.headers['x-goog-api-key'], seen.at(-1)!.body],
        ['/r/key/v1beta/models/g:generateContent', 'AIza-test', '{"contents":[]}'],
      );
      await (await scope.fetch!(new URL(`${origin}/elsewhere?x=1`))).text();
      assert.equal(seen.at(-1)!.url, '/elsewhere?x=1');
    });

    it('installs nothing without LIGHTNING_URL', () => {
      const scope: { fetch?: typeof fetch } = { fetch: globalThis.fetch };
      installFetchRouting(scope, undefined);
      assert.equal(scope.fetch, globalThis.fetch);
    });
  });
});

describe('a `/messages` call (@ai-sdk/anthropic) is the Messages API', () => {
  const route = (path: string, method = 'POST') => providerRoute(method, path, '', {})!;

  it('is recorded as one, with errors in Anthropic’s shape', () => {
    assert.equal(route('/messages').api, 'anthropic.messages');
    assert.equal(route('/messages/count_tokens').api, null, 'forwarded unrecorded, as /v1/messages/count_tokens is');
    assert.equal(route('/v1/messages').api, 'anthropic.messages');
    assert.equal(providerRoute('POST', '/messagesx', '', {}), null);
  });

  it('goes to /v1/messages at an upstream given as a bare origin, else to the base it was meant for', () => {
    assert.equal(providerPathAt('https://api.anthropic.com', route('/messages')), '/v1/messages');
    assert.equal(providerPathAt('http://127.0.0.1:8080/', route('/messages')), '/v1/messages');
    assert.equal(providerPathAt('https://gateway.example/v1', route('/messages')), '/messages');
    assert.equal(
      providerPathAt('https://gateway.example/anthropic', route('/messages/count_tokens')),
      '/messages/count_tokens',
    );
    assert.equal(providerPathAt('https://gateway.example/anthropic', route('/v1/messages')), '/v1/messages');
  });
});
