/**
 * util/httpPost.ts, the daemon's own JSON POSTs (translated calls to the policy server, APO's optimizer), against a
 * real local server: status and text, the byte cap counted as the answer arrives, a signal that stops a held answer,
 * and a pooled socket that fails before answering retried on a new connection.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { test } from 'node:test';
import { BodyOverLimitError } from '../../trainer-daemon/util/boundedBody';
import { postJson } from '../../trainer-daemon/util/httpPost';

async function server(
  t: { after(fn: () => unknown): void },
  handle: http.RequestListener,
): Promise<{ url: string; server: http.Server }> {
  const created = http.createServer(handle);
  await new Promise<void>((resolve) => created.listen(0, '127.0.0.1', resolve));
  t.after(
    () =>
      new Promise<void>((resolve) => {
        created.closeAllConnections();
        created.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(created.address() as net.AddressInfo).port}`, server: created };
}

test('the status and the answer; the request body and headers as given', async (t) => {
  const { url } = await server(t, (request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      response.writeHead(418, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({ body, auth: request.headers.authorization, type: request.headers['content-type'] }),
      );
    });
  });
  const posted = await postJson(`${url}/v1/x`, '{"a":1}', { headers: { authorization: 'Bearer k' }, maxBytes: 1000 });
  assert.equal(posted.status, 418);
  assert.deepEqual(JSON.parse(posted.text), { body: '{"a":1}', auth: 'Bearer k', type: 'application/json' });
});

test('an answer over the cap is refused as it arrives, declared or not', async (t) => {
  const { url } = await server(t, (request, response) => {
    request.resume();
    if (request.url === '/declared') {
      response.writeHead(200, { 'content-length': 5000 });
      response.end('x'.repeat(5000));
      return;
    }
    response.writeHead(200); // chunked: no length declared
    for (let i = 0; i < 10; i += 1) response.write('y'.repeat(500));
    response.end();
  });
  for (const path of ['/declared', '/chunked'])
    await assert.rejects(postJson(`${url}${path}`, '{}', { maxBytes: 1000 }), BodyOverLimitError, path);
});

test('a signal stops a held answer with its reason; the server sees the connection close', async (t) => {
  let closed = false;
  const { url } = await server(t, (request) => {
    request.resume();
    request.socket.once('close', () => (closed = true));
  });
  const controller = new AbortController();
  const posted = postJson(`${url}/slow`, '{}', { signal: controller.signal, maxBytes: 1000 });
  setTimeout(() => controller.abort(new Error('no answer within 50 ms')), 50);
  await assert.rejects(posted, /no answer within 50 ms/);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(closed);
  await assert.rejects(
    postJson(`${url}/slow`, '{}', { signal: AbortSignal.timeout(10), maxBytes: 1000 }),
    /aborted due to timeout/,
    "AbortSignal.timeout's reason (the translated call's 504)",
  );
});

test('a pooled keep-alive socket that fails before any answer byte is retried on a new connection: every call is answered', async (t) => {
  const served = new WeakMap<object, number>();
  let dropped = 0;
  const { url } = await server(t, (request, response) => {
    // A kept-alive socket's second request finds it gone (as a server that had closed it): nothing is answered.
    const count = (served.get(request.socket) ?? 0) + 1;
    served.set(request.socket, count);
    if (count > 1) {
      dropped += 1;
      request.socket.destroy();
      return;
    }
    request.resume();
    request.on('end', () => response.end('{}'));
  });
  for (let i = 0; i < 6; i += 1)
    assert.equal((await postJson(`${url}/v1`, '{}', { maxBytes: 100 })).status, 200, `call ${i}`);
  assert.ok(dropped >= 2, `pooled sockets failed before answering (${dropped}), and each call was answered anyway`);
});
