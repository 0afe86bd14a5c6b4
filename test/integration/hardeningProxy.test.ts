/**
 * The proxy against hostile input from either side (deeply nested JSON from the agent or the
 * upstream, status lines Node refuses to forward, an upstream echoing the daemon's key) and the
 * acknowledgement contract under kill -9: a call the agent got an answer for is in the store.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { startDaemon, type RunningDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';
import { post } from '../helpers/http';

const DAEMON_KEY = 'daemon-upstream-key-not-key-shaped-42';

function nested(depth: number): string {
  return `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
}

const chatAnswer = (id: string): string =>
  JSON.stringify({
    id,
    object: 'chat.completion',
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  });

/** An upstream whose answer is chosen by the request's model name. */
function hostileUpstream(): Promise<{
  url: string;
  targets: string[];
  auths: Array<string | undefined>;
  close(): Promise<void>;
}> {
  let counter = 0;
  const targets: string[] = [];
  const auths: Array<string | undefined> = [];
  const server = http.createServer((request, response) => {
    targets.push(request.url ?? '');
    auths.push(request.headers.authorization);
    let raw = '';
    request.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk));
    request.on('end', () => {
      const model = (/"model":"([^"]+)"/.exec(raw) ?? [])[1];
      counter += 1;
      if (model === 'deep-json') {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(`{"id":"deep","choices":[{"index":0,"message":{"role":"assistant","content":${nested(5_000)}}}]}`);
      } else if (model === 'deep-sse') {
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.end(
          `data: {"id":"deep","choices":[{"index":0,"delta":{"content":"x"}}],"x":${nested(5_000)}}\n\ndata: [DONE]\n\n`,
        );
      } else if (model === 'echo-key') {
        response.writeHead(401, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify({
            error: { message: `Incorrect API key provided: ${String(request.headers.authorization).slice(7)}` },
          }),
        );
      } else {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(chatAnswer(`chatcmpl-${counter}`));
      }
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`,
        targets,
        auths,
        close: () => new Promise((done) => server.close(() => done())),
      }),
    ),
  );
}

/** An upstream that answers every request with the given raw status line (and keeps the socket open). */
function rawStatusUpstream(statusLine: string): Promise<{ url: string; close(): void }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('data', () =>
      socket.write(
        `${statusLine}\r\nContent-Type: application/json\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\n{}`,
      ),
    );
    socket.on('error', () => {});
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`,
        close: () => {
          for (const socket of sockets) socket.destroy();
          server.close();
        },
      }),
    ),
  );
}

describe('the proxy survives hostile input', () => {
  let upstream: Awaited<ReturnType<typeof hostileUpstream>>;
  let daemon: RunningDaemon;
  let client: RpcClient;
  const cleanups: Array<() => void> = [];
  before(async () => {
    upstream = await hostileUpstream();
    const dir = tempDir({ after: (fn) => cleanups.push(fn) });
    daemon = await startDaemon(path.join(dir, 'store.db'), ['--upstream', upstream.url], {
      LIGHTNING_UPSTREAM_API_KEY: DAEMON_KEY,
      LIGHTNING_UPSTREAM_TIMEOUT_MS: '20000',
    });
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    await upstream.close();
    for (const cleanup of cleanups) cleanup();
  });

  const spansOf = async (id: string, count: number) =>
    (
      await waitFor(async () => {
        const detail = await client.request('getRollout', { id });
        return detail.spans.length >= count ? detail : undefined;
      }, `${count} span(s)`)
    ).spans;

  test('an agent request nested 2,500 levels deep is forwarded and recorded, cut at the depth limit', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const response = await post(
      `${url}/v1/chat/completions`,
      `{"model":"m","messages":[],"metadata":${nested(2_500)}}`,
    );
    assert.equal(response.status, 200, response.body);
    const [span] = await spansOf(rollout.id, 1);
    assert.match(JSON.stringify(span!.attributes['lightning.request']), /nested deeper than 64 levels/);
    assert.equal(daemon.process.exitCode, null, 'the daemon is alive');
  });

  for (const model of ['deep-json', 'deep-sse']) {
    test(`an upstream answer nested 5,000 levels deep (${model}) reaches the agent and is recorded`, async () => {
      const { rollout, url } = await client.request('startAgentRun', {});
      const response = await post(
        `${url}/v1/chat/completions`,
        JSON.stringify({ model, stream: model === 'deep-sse', messages: [] }),
      );
      assert.equal(response.status, 200, response.body);
      assert.ok(response.body.length > 5_000 * 5, 'the whole answer came through');
      const [span] = await spansOf(rollout.id, 1);
      assert.equal(span!.attributes['gen_ai.response.id'], 'deep');
      assert.equal((await client.request('getStats', {})).schemaVersion > 0, true, 'still serving');
    });
  }

  for (const [line, why] of [
    ['HTTP/1.1 099 Weird', /HTTP status 99/],
    ['HTTP/1.1 101 Switching Protocols', /switching protocols/],
  ] as const) {
    test(`an upstream answering "${line}" gets the agent a 502 that says why, at once`, async () => {
      const bad = await rawStatusUpstream(line);
      try {
        const { rollout, url } = await client.request('startAgentRun', { upstream: bad.url });
        const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
        assert.equal(response.status, 502, response.body);
        assert.match(response.body, why);
        const [span] = await spansOf(rollout.id, 1);
        assert.equal(span!.statusCode, 'error');
        assert.equal(daemon.process.exitCode, null, 'the daemon is alive');
      } finally {
        bad.close();
      }
    });
  }

  test("the daemon's own key echoed in an upstream error is stored nowhere (status message included)", async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'echo-key', messages: [] }));
    assert.equal(response.status, 401);
    const [span] = await spansOf(rollout.id, 1);
    assert.ok(!JSON.stringify(span).includes(DAEMON_KEY), JSON.stringify(span));
    assert.match(span!.statusMessage!, /Incorrect API key provided: \[redacted\]/);
  });

  test('a web page’s text/plain;charset=json cannot drive the proxy or /reward (415); an agent’s x-api-key keeps the daemon key out', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    for (const endpoint of ['/v1/chat/completions', '/reward']) {
      const simple = await post(`${url}${endpoint}`, JSON.stringify({ model: 'm', messages: [], value: 1 }), {
        'content-type': 'text/plain;charset=json',
      });
      assert.equal(simple.status, 415, `${endpoint}: ${simple.body}`);
    }
    assert.equal((await client.request('getRollout', { id: rollout.id })).spans.length, 0);
    const own = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }), {
      'content-type': 'application/json',
      'x-api-key': 'agent-own-anthropic-key',
    });
    assert.equal(own.status, 200);
    assert.equal(upstream.auths.at(-1), undefined, 'the daemon key was not added next to the agent’s own');
  });

  test('an upstream URL with a query string keeps its path and query', async () => {
    const { rollout, url } = await client.request('startAgentRun', {
      upstream: `${upstream.url}?api-version=2024-10-21`,
    });
    const response = await post(`${url}/v1/chat/completions?extra=1`, JSON.stringify({ model: 'm', messages: [] }));
    assert.equal(response.status, 200, response.body);
    assert.equal(upstream.targets.at(-1), '/v1/chat/completions?api-version=2024-10-21&extra=1');
    await spansOf(rollout.id, 1);
  });
});

test('kill -9 right after the agent got its answers: every answered call is in the store', async (t) => {
  const upstream = await hostileUpstream();
  t.after(() => upstream.close());
  const dir = tempDir(t);
  for (let round = 0; round < 3; round += 1) {
    const store = path.join(dir, `store-${round}.db`);
    const daemon = await startDaemon(store, ['--upstream', upstream.url]);
    const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
    const { rollout, url } = await client.request('startAgentRun', {});
    client.dispose();
    const answered: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        const response = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
        if (response.status === 200) {
          answered.push((JSON.parse(response.body) as { id: string }).id);
          // The first answer is enough to kill on: the rest of the batch is in flight.
          daemon.process.kill('SIGKILL');
        }
      }).map((call) => call.catch(() => undefined)),
    );
    await daemon.exited;
    assert.ok(answered.length > 0, 'at least one call was answered before the kill');
    const reopened = Store.open(store);
    const stored = reopened.getRolloutDetail(rollout.id).spans.map((span) => span.attributes['gen_ai.response.id']);
    reopened.close();
    for (const id of answered)
      assert.ok(
        stored.includes(id),
        `round ${round}: answered call ${id} is missing after kill -9 (stored: ${stored.join(', ')})`,
      );
  }
});

test('past the in-flight byte budget a call gets a retryable 503; an oversized non-streamed answer a 502', async (t) => {
  // An upstream that takes requests and answers only when told (or with 3 MiB for model "huge").
  const held: http.ServerResponse[] = [];
  let received = 0;
  const server = http.createServer((request, response) => {
    let raw = '';
    request.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk));
    request.on('end', () => {
      received += 1;
      if (raw.includes('"huge"')) {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ id: 'x', pad: 'y'.repeat(3 * 1024 * 1024) }));
      } else held.push(response);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const upstreamUrl = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`;
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstreamUrl], {
    LIGHTNING_MAX_BUFFERED_BYTES: String(4 * 1024 * 1024),
    LIGHTNING_MAX_UPSTREAM_BODY_BYTES: String(2 * 1024 * 1024),
  });
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { url } = await client.request('startAgentRun', {});
  const big = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'z'.repeat(3 * 1024 * 1024) }] });
  const first = post(`${url}/v1/chat/completions`, big);
  await waitFor(() => received === 1, 'the first call to reach the upstream');
  const second = await post(`${url}/v1/chat/completions`, big);
  assert.equal(second.status, 503, second.body.slice(0, 200));
  assert.match(second.body, /bytes of requests in flight/);
  for (const response of held) response.end(chatAnswer('chatcmpl-held'));
  assert.equal((await first).status, 200);
  const huge = await post(`${url}/v1/chat/completions`, JSON.stringify({ model: 'huge', messages: [] }));
  assert.equal(huge.status, 502);
  assert.match(huge.body, /over the 2097152-byte limit/);
});

/** What one request on an agent got: its status (0: none), whether sending it failed, whether it reused a socket. */
interface Sent {
  status: number;
  sendError?: string;
  reused: boolean;
}

function sendOn(agent: http.Agent, url: string, body: Buffer, headers: Record<string, string>): Promise<Sent> {
  return new Promise((resolve) => {
    let sendError: string | undefined;
    const outcome = (status: number): Sent => ({
      status,
      ...(sendError === undefined ? {} : { sendError }),
      reused: request.reusedSocket,
    });
    const request = http.request(url, { method: 'POST', agent, headers }, (response) => {
      response.resume();
      // Once the body is sent too: a request error after the answer (EPIPE: the daemon stopped reading and closed)
      // still counts.
      const sent = new Promise((done) => (request.writableFinished ? done(undefined) : request.once('finish', done)));
      response.on('end', () => void sent.then(() => setImmediate(() => resolve(outcome(response.statusCode ?? 0)))));
    });
    request.on('error', (error: NodeJS.ErrnoException) => {
      sendError = error.code ?? error.message;
      setTimeout(() => resolve(outcome(0)), 500);
    });
    request.end(body);
  });
}

test('a call refused while its body is still coming (the byte budget, the size cap) is read off: the client finishes sending, reads the refusal and keeps its connection', async (t) => {
  const upstream = await hostileUpstream();
  t.after(() => upstream.close());
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstream.url], {
    LIGHTNING_MAX_BUFFERED_BYTES: String(4 * 1024 * 1024),
  });
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { url } = await client.request('startAgentRun', {});
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  const json = { 'content-type': 'application/json' };
  const small = Buffer.from(JSON.stringify({ model: 'm', messages: [] }));
  assert.deepEqual(await sendOn(agent, `${url}/v1/chat/completions`, small, json), { status: 200, reused: false });
  // 16 MiB against a 4 MiB budget: refused once 4 MiB are read, while the client still has 12 to send (the daemon
  // that stopped reading and closed made it fail with EPIPE, and a fetch() could lose the 503).
  const big = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'z'.repeat(16 << 20) }] }));
  assert.deepEqual(await sendOn(agent, `${url}/v1/chat/completions`, big, json), { status: 503, reused: true });
  assert.deepEqual(await sendOn(agent, `${url}/v1/chat/completions`, small, json), { status: 200, reused: true });
  // Over /reward's 1 MiB cap: declared up front, then chunked (no length to go by).
  const reward = Buffer.alloc(3 << 20, 0x20);
  const declared = { ...json, 'content-length': String(reward.length) };
  assert.deepEqual(await sendOn(agent, `${url}/reward`, reward, declared), { status: 413, reused: true });
  const chunked = { ...json, 'transfer-encoding': 'chunked' };
  assert.deepEqual(await sendOn(agent, `${url}/reward`, reward, chunked), { status: 413, reused: true });
  assert.deepEqual(await sendOn(agent, `${url}/v1/chat/completions`, small, json), { status: 200, reused: true });
  // More than 64 MiB still to come is not read off: the 413 comes at once, and closes the connection.
  const declaredHuge = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const request = http.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...json, 'content-length': String(100 << 20) },
    });
    request.on('response', (response) => {
      response.resume();
      request.destroy();
      resolve(response);
    });
    request.on('error', reject);
    request.write(small);
  });
  assert.equal(declaredHuge.statusCode, 413);
  assert.equal(declaredHuge.headers.connection, 'close');
});

/**
 * A chat completions upstream that holds every request whose body contains `hold` (in `held`, to answer later) and
 * answers the others at once with `answerId`.
 */
async function holdingUpstream(
  t: TestContext,
  hold: string,
  answerId: string,
): Promise<{ url: string; held: http.ServerResponse[] }> {
  const held: http.ServerResponse[] = [];
  const server = http.createServer((request, response) => {
    let raw = '';
    request.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk));
    request.on('end', () => {
      if (raw.includes(hold)) held.push(response);
      else response.writeHead(200, { 'content-type': 'application/json' }).end(chatAnswer(answerId));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`, held };
}

test('one rollout’s hanging calls cannot starve another’s: past its share a rollout gets 429 + Retry-After', async (t) => {
  const { url: upstream, held } = await holdingUpstream(t, '"hang"', 'chatcmpl-other');
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), ['--upstream', upstream], {
    LIGHTNING_MAX_CALLS_PER_ROLLOUT: '3',
  });
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const greedy = await client.request('startAgentRun', {});
  const other = await client.request('startAgentRun', {});
  const hanging = Array.from({ length: 3 }, () =>
    post(`${greedy.url}/v1/chat/completions`, JSON.stringify({ model: 'hang', messages: [] })).catch(() => undefined),
  );
  await waitFor(() => held.length === 3, 'three held calls');
  const refused = await new Promise<{ status: number; retryAfter: string | undefined; body: string }>(
    (resolve, reject) => {
      const request = http.request(
        `${greedy.url}/v1/chat/completions`,
        { method: 'POST', headers: { 'content-type': 'application/json' } },
        (response) => {
          let body = '';
          response.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
          response.on('end', () =>
            resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'], body }),
          );
        },
      );
      request.on('error', reject);
      request.end(JSON.stringify({ model: 'hang', messages: [] }));
    },
  );
  assert.equal(refused.status, 429, refused.body);
  assert.equal(refused.retryAfter, '1');
  assert.match(refused.body, /3 LLM calls in flight/);
  const answered = await post(`${other.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
  assert.equal(answered.status, 200, 'the other rollout is served');
  for (const response of held) response.end(chatAnswer('chatcmpl-late'));
  await Promise.all(hanging);
});

test('a rollout’s calls translated for a policy server count toward its share too: past it, 429 in the agent’s API shape', async (t) => {
  // A chat-completions-only server (the trainer's policy, a checkpoint): Anthropic calls reach it translated.
  const { url: policy, held } = await holdingUpstream(t, 'hang', 'chatcmpl-policy');
  const daemon = await startDaemon(path.join(tempDir(t), 'store.db'), [], { LIGHTNING_MAX_CALLS_PER_ROLLOUT: '3' });
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const greedy = await client.request('startAgentRun', { upstream: policy, tokenIds: true });
  const other = await client.request('startAgentRun', { upstream: policy, tokenIds: true });
  const messages = (url: string, content: string) =>
    post(
      `${url}/v1/messages`,
      JSON.stringify({ model: 'policy', max_tokens: 8, messages: [{ role: 'user', content }] }),
      { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    );
  // One chat call relayed as it is and two Anthropic calls translated: three of the rollout's calls in flight.
  const hanging = [
    post(`${greedy.url}/v1/chat/completions`, JSON.stringify({ model: 'hang', messages: [] })),
    messages(greedy.url, 'hang'),
    messages(greedy.url, 'hang'),
  ].map((call) => call.catch(() => undefined));
  await waitFor(() => held.length === 3, 'three held calls');
  const refused = await messages(greedy.url, 'one more');
  assert.equal(refused.status, 429, refused.body);
  assert.equal(refused.retryAfter, '1');
  const body = JSON.parse(refused.body) as { type: string; error: { type: string; message: string } };
  assert.deepEqual([body.type, body.error.type], ['error', 'rate_limit_error'], 'the shape the Anthropic SDK retries');
  assert.match(body.error.message, /3 LLM calls in flight/);
  const answered = await messages(other.url, 'hello');
  assert.equal(answered.status, 200, `the other rollout is served: ${answered.body}`);
  for (const response of held) response.end(chatAnswer('chatcmpl-late'));
  await Promise.all(hanging);
  assert.equal((await messages(greedy.url, 'after')).status, 200, 'the share is given back as calls end');
});
