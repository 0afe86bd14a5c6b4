import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SpanKind } from '@opentelemetry/api';
import type { RolloutDetail } from '../../trainer-daemon/protocol';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { CLI, runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { encode, oneSpan } from '../helpers/otlp';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';
import { post } from '../helpers/http';

const DAEMON_KEY = 'sk-daemon-9876543210zyxwvutsrqponm';

/** Sends raw bytes and returns what came back before the server closed (or a short wait passed). */
function raw(port: number, request: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('close', () => resolve(text));
    socket.on('error', () => resolve(text));
    setTimeout(() => socket.destroy(), 1_000).unref();
  });
}

describe('daemon hardening', () => {
  let upstream: ScriptedUpstream;
  let daemon: RunningDaemon;
  let client: RpcClient;
  let store: string;
  let dir: string;
  before(async () => {
    upstream = await startScriptedUpstream();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-hardening-'));
    store = path.join(dir, 'store.db');
    daemon = await startDaemon(store, ['--upstream', upstream.url], { LIGHTNING_UPSTREAM_API_KEY: DAEMON_KEY });
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    await upstream.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const recorded = (id: string, count: number): Promise<RolloutDetail> =>
    waitFor(async () => {
      const detail = await client.request('getRollout', { id });
      return detail.spans.length >= count ? detail : undefined;
    }, `${count} recorded span(s)`);

  test('request targets that are not a path get a 400 and never take the daemon down', async () => {
    const port = Number(new URL(daemon.ready.url).port);
    const host = `Host: 127.0.0.1:${port}`;
    assert.match(await raw(port, `GET //[::1/ HTTP/1.1\r\n${host}\r\n\r\n`), /^HTTP\/1\.1 400/);
    assert.match(
      await raw(
        port,
        `GET //[::1/ HTTP/1.1\r\nHost: evil.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      ),
      /^HTTP\/1\.1 404/,
    );
    assert.match(await raw(port, `GET http://127.0.0.1/health HTTP/1.1\r\n${host}\r\n\r\n`), /^HTTP\/1\.1 400/);
    assert.equal((await client.request('getStats', {})).schemaVersion > 0, true, 'still serving');
  });

  test("checkpoints/export: the schema takes either platform's absolute folder, the daemon its own platform's only", async () => {
    // `C:\\out` parses (the protocol is browser-safe: no node:path), but on POSIX it is a relative folder; on Windows
    // it is absolute and the unknown checkpoint is what is refused.
    const kind = (error: unknown): string | undefined => (error instanceof DaemonError ? error.kind : undefined);
    await assert.rejects(
      client.request('exportCheckpoint', { id: 'ckpt-none', format: 'peft', out: 'C:\\out' }),
      (error: Error) =>
        process.platform === 'win32'
          ? kind(error) === 'not_found'
          : kind(error) === 'invalid_input' &&
            /out must be an absolute path on the daemon's machine/.test(error.message),
    );
    await assert.rejects(
      client.request('exportCheckpoint', { id: 'ckpt-none', format: 'peft', out: path.join(dir, 'out') }),
      (error: Error) => kind(error) === 'not_found',
    );
  });

  test("the daemon's key goes only to the daemon's own upstream, never to a rollout's own", async () => {
    const own = await client.request('startAgentRun', { upstream: upstream.url });
    await post(`${own.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }));
    assert.equal(upstream.requests.at(-1)!.headers.authorization, undefined);
    const azure = await client.request('startAgentRun', {});
    await post(`${azure.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: [] }), {
      'content-type': 'application/json',
      'api-key': 'azure-key-1',
    });
    assert.equal(
      upstream.requests.at(-1)!.headers.authorization,
      undefined,
      'an api-key header is the agent’s own key',
    );
    assert.equal(upstream.requests.at(-1)!.headers['api-key'], 'azure-key-1');
  });

  test('an upstream that drops a stream: the agent is not left waiting and the call is recorded', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const outcome = await post(
      `${url}/v1/chat/completions`,
      JSON.stringify({ model: 'drop', stream: true, messages: [] }),
    ).catch((error: Error) => ({ status: -1, body: error.message }));
    assert.ok(outcome.status === 200 || outcome.status === -1, 'the agent sees the stream end');
    const [span] = (await recorded(rollout.id, 1)).spans;
    assert.equal(span!.statusCode, 'error');
    assert.match(span!.statusMessage!, /broke/);
    const partial = (span!.attributes['lightning.response'] as { choices: Array<{ message: { content: string } }> })
      .choices[0]!.message.content;
    assert.equal(partial, 'Par', 'what arrived is kept');
  });

  test('multi-byte characters split across network chunks are recorded intact', async () => {
    const { rollout, url } = await client.request('startAgentRun', {});
    const response = await post(
      `${url}/v1/chat/completions`,
      JSON.stringify({ model: 'utf8', stream: true, messages: [] }),
    );
    assert.match(response.body, /Zürich ☀️ 24°C/);
    const [span] = (await recorded(rollout.id, 1)).spans;
    assert.equal(
      (span!.attributes['lightning.response'] as { choices: Array<{ message: { content: string } }> }).choices[0]!
        .message.content,
      'Zürich ☀️ 24°C',
    );
  });

  test('a chunked body over the limit gets a 413, not a reset', async () => {
    const { url } = await client.request('startAgentRun', {});
    const status = await new Promise<number>((resolve, reject) => {
      const request = http.request(
        `${url}/reward`,
        { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
        (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        },
      );
      request.on('error', reject);
      const piece = Buffer.alloc(256 * 1024, 0x20);
      for (let i = 0; i < 6; i += 1) request.write(piece);
      request.end();
    });
    assert.equal(status, 413);
  });

  test('secrets in request bodies, OTLP attributes and command lines are not stored', async () => {
    const { rollout, url } = await client.request('startAgentRun', {
      source: {
        kind: 'command',
        argv: ['python', 'agent.py', '--api-key', 'hunter2-secret', '--token=abc123', 'sk-proj-abcdefghijklmnopqrstu'],
      },
    });
    await post(
      `${url}/v1/chat/completions`,
      JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: 'my key is sk-live-0123456789abcdefghijkl ok' }],
      }),
    );
    const traced = oneSpan(
      'http GET',
      {
        'url.full': `${url}/v1/chat/completions`,
        'http.request.header.authorization': 'Bearer xyz',
        'gen_ai.system': 'openai',
      },
      SpanKind.CLIENT,
    );
    await post(`${url}/v1/traces`, encode(traced, 'protobuf'), { 'content-type': 'application/x-protobuf' });
    await recorded(rollout.id, 2);
    const bytes =
      fs.readFileSync(store).toString('latin1') +
      (fs.existsSync(`${store}-wal`) ? fs.readFileSync(`${store}-wal`).toString('latin1') : '');
    for (const secret of [
      'sk-live-0123456789abcdefghijkl',
      'hunter2-secret',
      'abc123',
      'sk-proj-abcdefghijklmnopqrstu',
      'Bearer xyz',
      url.split('/r/')[1]!,
    ]) {
      assert.ok(!bytes.includes(secret), `${secret} reached the store`);
    }
    const detail = await client.request('getRollout', { id: rollout.id });
    assert.deepEqual(detail.rollout.source, {
      kind: 'command',
      argv: ['python', 'agent.py', '--api-key', '[redacted]', '--token=[redacted]', '[redacted]'],
    });
    const otlpSpan = detail.spans.find((s) => s.name === 'http GET')!;
    assert.match(String(otlpSpan.attributes['url.full']), /\/r\/…\/v1\/chat\/completions$/);
  });

  test('a forged daemon.json (remote URL, foreign token file) is ignored: the CLI reads the store itself', async (t) => {
    const cwd = tempDir(t);
    const dir = path.join(cwd, '.lightning');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(cwd, 'secret.txt'), 'not-for-you');
    const storeFile = path.join(dir, 'store.db');
    Store.open(storeFile).close();
    const sink = http.createServer((request, response) => {
      sink.emit('seen', request.headers.authorization);
      response.end();
    });
    let seen: unknown;
    sink.on('seen', (value) => (seen = value));
    await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
    t.after(() => sink.close());
    const forged = {
      url: `http://example.com:${(sink.address() as net.AddressInfo).port}`,
      pid: process.pid,
      store: storeFile,
      tokenFile: path.join(cwd, 'secret.txt'),
      version: '0.1.0',
      startedAt: 1,
    };
    fs.writeFileSync(path.join(dir, 'daemon.json'), JSON.stringify(forged));
    fs.writeFileSync(path.join(dir, 'daemon.token'), 'x', { mode: 0o600 });
    const result = await runCli(['rollouts'], { cwd });
    assert.equal(seen, undefined, 'nothing was sent to the forged address');
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout.trim(), 'No rollouts match.');
  });
});

test('parallel lightning runs in a fresh folder share the first one’s daemon and all finish', async (t) => {
  const cwd = tempDir(t);
  const runs = Array.from(
    { length: 3 },
    () =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, [CLI, 'run', '--', process.execPath, '-e', 'setTimeout(() => {}, 600)'], {
          cwd,
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        child.on('close', (code) => resolve({ code, stderr }));
      }),
  );
  const results = await Promise.all(runs);
  for (const result of results) {
    assert.equal(result.code, 0, result.stderr);
    assert.equal((JSON.parse(result.stderr.trim().split('\n').at(-1)!) as { status: string }).status, 'succeeded');
  }
  const list = JSON.parse((await runCli(['rollouts', '--json'], { cwd })).stdout) as {
    items: Array<{ status: string }>;
  };
  assert.deepEqual(
    list.items.map((r) => r.status),
    ['succeeded', 'succeeded', 'succeeded'],
  );
});

test('SIGTERM while an LLM call streams: the call completes for the agent, is recorded, and the daemon exits 0', async (t) => {
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const store = path.join(tempDir(t), 'store.db');
  const daemon = await startDaemon(store, ['--upstream', upstream.url]);
  t.after(() => daemon.stop('SIGKILL'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  const { rollout, url } = await client.request('startAgentRun', {});
  client.dispose();
  let received = '';
  const finished = new Promise<void>((resolve, reject) => {
    const request = http.request(
      `${url}/v1/chat/completions`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (response) => {
        response.setEncoding('utf8').on('data', (chunk: string) => {
          received += chunk;
          if (received.includes('"role"') && !received.includes('sent-signal')) {
            received += 'sent-signal';
            daemon.process.kill('SIGTERM');
          }
          upstream.release();
        });
        response.on('end', resolve);
      },
    );
    request.on('error', reject);
    request.end(JSON.stringify({ model: 'gated', stream: true, messages: [] }));
  });
  await finished;
  assert.ok(received.includes('data: [DONE]'), 'the agent got the whole stream');
  assert.equal(await daemon.exited, 0);
  const reopened = Store.open(store);
  t.after(() => reopened.close());
  assert.equal(reopened.getRolloutDetail(rollout.id).spans.length, 1, 'the call in flight at SIGTERM was recorded');
});
