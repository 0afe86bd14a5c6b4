import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { RolloutDetail, type Span } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { CLI, REPO_ROOT, runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { runAgent } from '../helpers/runAgent';
import { ANSWER, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';

const AGENTS = path.join(REPO_ROOT, 'test', 'fixtures', 'agents');
const USER_KEY = 'sk-test-0123456789abcdefghijklmnop';
const DAEMON_KEY = 'sk-daemon-9876543210zyxwvutsrqponm';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

type Request = Record<string, unknown> & { messages?: Array<Record<string, unknown>> };
const requestOf = (span: Span): Request => span.attributes['lightning.request'] as Request;
const responseOf = (span: Span): Record<string, unknown> =>
  span.attributes['lightning.response'] as Record<string, unknown>;

const lightningRun = (
  t: Parameters<typeof tempDir>[0],
  command: string[],
  env: NodeJS.ProcessEnv = {},
  extra: string[] = [],
) => runAgent(t, upstream.url, command, { OPENAI_API_KEY: USER_KEY, ...env }, extra);

describe('lightning run with real agent SDKs', () => {
  for (const mode of ['chat', 'stream'] as const) {
    test(`openai SDK, chat completions${mode === 'stream' ? ', streaming' : ''}, with a tool: every call, the tool call, the answer and the reward`, async (t) => {
      const run = await lightningRun(t, ['node', path.join(AGENTS, 'openai-agent.mjs'), mode]);
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
      assert.deepEqual(run.last, {
        event: 'rollout-finished',
        id: run.detail.rollout.id,
        status: 'succeeded',
        reward: 1,
      });
      const llm = run.detail.spans.filter((s) => s.category === 'llm');
      assert.equal(llm.length, 2);
      assert.deepEqual(
        llm.map((s) => s.attributes['lightning.call_index']),
        [1, 2],
      );
      const [first, second] = llm as [Span, Span];
      const toolCalls = (
        responseOf(first).choices as Array<{
          message: { tool_calls: Array<{ id: string; function: { name: string; arguments: string } }> };
        }>
      )[0]!.message.tool_calls;
      assert.deepEqual(
        toolCalls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]),
        [['call_paris', 'get_weather', { city: 'Paris' }]],
      );
      assert.equal((requestOf(first).tools as unknown[]).length, 1);
      assert.deepEqual(
        requestOf(second).messages!.map((m) => m.role),
        ['user', 'assistant', 'tool'],
      );
      const answer = (responseOf(second).choices as Array<{ message: { content: string }; finish_reason: string }>)[0]!;
      assert.equal(answer.message.content, ANSWER);
      assert.equal(answer.finish_reason, 'stop');
      assert.equal(second.attributes['lightning.streamed'], mode === 'stream');
      assert.equal(second.promptTokens, 12);
      assert.equal(second.completionTokens, 7);
      assert.equal(second.attributes['gen_ai.request.model'], 'test-model');
      assert.equal(second.statusCode, 'ok');
      assert.ok(second.startMs >= first.endMs!, 'calls are in order');
      assert.equal(run.detail.rollout.llmCalls, 2);
      assert.deepEqual(
        run.detail.rewards.map((r) => [r.value, r.source, r.comment]),
        [[1, 'agent', 'answer mentions the weather']],
      );
      const text = (await runCli(['show', run.detail.rollout.id], { cwd: run.cwd })).stdout;
      assert.match(text, /← user: What is the weather in Paris\?\n\s+→ tool call get_weather\(\{"city":"Paris"\}\)/);
      assert.match(text, /← tool: Paris: sunny, 24°C\n\s+→ "It is sunny in Paris\."/);
    });
  }

  test('openai SDK, Responses API: calls recorded with output and usage', async (t) => {
    const run = await lightningRun(t, ['node', path.join(AGENTS, 'openai-agent.mjs'), 'responses']);
    assert.equal(run.code, 0, run.stderr);
    const llm = run.detail.spans.filter((s) => s.category === 'llm');
    assert.deepEqual(
      llm.map((s) => s.attributes['lightning.api']),
      ['responses', 'responses'],
    );
    assert.equal((responseOf(llm[0]!).output as Array<{ type: string; name: string }>)[0]!.name, 'get_weather');
    assert.equal(llm[1]!.promptTokens, 12);
    assert.equal(run.last.reward, 1);
  });

  test('a Python agent using only the standard library, with a task', async (t) => {
    const run = await lightningRun(t, ['python3', path.join(AGENTS, 'stdlib_agent.py')], {}, [
      '--task',
      '{"city":"Oslo"}',
      '--task-id',
      'oslo-1',
    ]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(run.detail.rollout.task, { id: 'oslo-1', input: { city: 'Oslo' } });
    const first = run.detail.spans.find((s) => s.category === 'llm')!;
    assert.equal(requestOf(first).messages![0]!.content, 'What is the weather in Oslo?');
    assert.equal(run.detail.rollout.reward, 1);
  });

  test("the agent's exit code is lightning run's; a failed agent is a failed rollout", async (t) => {
    const run = await lightningRun(t, ['node', path.join(AGENTS, 'openai-agent.mjs'), 'chat', '3']);
    assert.equal(run.code, 3);
    assert.equal(run.last.status, 'failed');
    assert.equal(run.detail.rollout.exitCode, 3);
    assert.equal(run.detail.rollout.error, 'exited with code 3');
    const missing = await lightningRun(t, ['no-such-agent-binary']);
    assert.equal(missing.code, 127);
    assert.equal(missing.detail.rollout.status, 'failed');
    assert.match(missing.detail.rollout.error!, /cannot run no-such-agent-binary/);
  });

  test("the user's own OPENAI_BASE_URL stays the upstream; their key is forwarded and never stored", async (t) => {
    const before = upstream.requests.length;
    const run = await lightningRun(t, ['node', path.join(AGENTS, 'openai-agent.mjs'), 'chat'], {
      LIGHTNING_UPSTREAM_URL: 'http://127.0.0.1:9/v1',
      OPENAI_BASE_URL: upstream.url,
    });
    assert.equal(run.code, 0, run.stderr);
    const seen = upstream.requests.slice(before);
    assert.equal(seen.length, 2, "both calls reached the user's own upstream");
    assert.ok(
      seen.every((r) => r.headers.authorization === `Bearer ${USER_KEY}`),
      'with the agent key',
    );
    const store = fs.readFileSync(path.join(run.cwd, '.lightning', 'store.db'));
    assert.ok(!store.includes(Buffer.from(USER_KEY)), 'the key is not in the store file');
    assert.ok(!store.includes(Buffer.from('sk-test-')), 'nor any part of it');
  });
});

describe('proxy behaviour', () => {
  let daemon: RunningDaemon;
  let client: RpcClient;
  let cwd: string;
  before(async () => {
    cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'lightning-proxy-'));
    daemon = await startDaemon(path.join(cwd, 'store.db'), ['--upstream', upstream.url], {
      LIGHTNING_UPSTREAM_TIMEOUT_MS: '1500',
      LIGHTNING_UPSTREAM_API_KEY: DAEMON_KEY,
    });
    client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  });
  after(async () => {
    client.dispose();
    await daemon.stop();
    fs.rmSync(cwd, { recursive: true, force: true });
  });

  async function newRun(upstreamUrl: string | null = null): Promise<{ id: string; url: string }> {
    const { rollout, url } = await client.request('startAgentRun', { label: 'proxy', upstream: upstreamUrl });
    return { id: rollout.id, url };
  }

  function post(
    url: string,
    body: string,
    headers: Record<string, string> = { 'content-type': 'application/json' },
  ): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
    return new Promise((resolve, reject) => {
      const request = http.request(url, { method: 'POST', headers }, (response) => {
        let text = '';
        response.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text, headers: response.headers }));
      });
      request.on('error', reject);
      request.end(body);
    });
  }

  /** The record is committed shortly after the response (group commit): wait for it. */
  async function recorded(id: string, count: number): Promise<RolloutDetail> {
    return waitFor(async () => {
      const detail = await client.request('getRollout', { id });
      return detail.spans.length >= count ? detail : undefined;
    }, `${count} recorded call(s)`);
  }

  const chat = (model: string, extra: object = {}): string =>
    JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });

  test('upstream 500 reaches the agent unchanged and is recorded as a failed call', async () => {
    const run = await newRun();
    const response = await post(`${run.url}/v1/chat/completions`, chat('fail-500'));
    assert.equal(response.status, 500);
    assert.equal(JSON.parse(response.body).error.message, 'the model is overloaded');
    const { spans } = await recorded(run.id, 1);
    assert.equal(spans.length, 1);
    assert.equal(spans[0]!.statusCode, 'error');
    assert.match(spans[0]!.statusMessage!, /upstream HTTP 500: the model is overloaded/);
  });

  test('malformed upstream JSON, an unreachable upstream and a silent one each give the agent a clear error', async () => {
    const run = await newRun();
    const malformed = await post(`${run.url}/v1/chat/completions`, chat('fail-malformed'));
    assert.equal(malformed.status, 502);
    assert.match(JSON.parse(malformed.body).error.message, /not JSON/);
    const hang = await post(`${run.url}/v1/chat/completions`, chat('hang'));
    assert.equal(hang.status, 504);
    assert.match(JSON.parse(hang.body).error.message, /within 1500 ms/);
    const down = await newRun('http://127.0.0.1:9/v1');
    const refused = await post(`${down.url}/v1/chat/completions`, chat('test-model'));
    assert.equal(refused.status, 502);
    assert.match(
      JSON.parse(refused.body).error.message,
      /could not get a response from the upstream http:\/\/127\.0\.0\.1:9\/v1: .*ECONNREFUSED/,
    );
    const failed = (await recorded(run.id, 2)).spans.map((s) => s.statusCode);
    assert.deepEqual(failed, ['error', 'error']);
    assert.equal((await recorded(down.id, 1)).spans[0]!.statusCode, 'error');
  });

  test('bad requests get a clear 4xx and store nothing', async () => {
    const run = await newRun();
    const invalid = await post(`${run.url}/v1/chat/completions`, '{"model":');
    assert.equal(invalid.status, 400);
    assert.match(JSON.parse(invalid.body).error.message, /not valid JSON/);
    const wrongType = await post(`${run.url}/v1/chat/completions`, chat('test-model'), {
      'content-type': 'text/plain',
    });
    assert.equal(wrongType.status, 415);
    assert.match(JSON.parse(wrongType.body).error.message, /expected a JSON body/);
    const huge = await post(
      `${run.url}/v1/chat/completions`,
      JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'x'.repeat(33 * 1024 * 1024) }] }),
    );
    assert.equal(huge.status, 413);
    const unknown = await post(
      `${daemon.ready.url}/r/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/v1/chat/completions`,
      chat('test-model'),
    );
    assert.equal(unknown.status, 404);
    assert.match(JSON.parse(unknown.body).error.message, /unknown rollout key/);
    const badReward = await post(`${run.url}/reward`, JSON.stringify({ value: 'great' }));
    assert.equal(badReward.status, 400);
    assert.match(JSON.parse(badReward.body).error.message, /body\.value/);
    // One good call after the bad ones: once it is recorded, anything queued before it would be too.
    assert.equal((await post(`${run.url}/v1/chat/completions`, chat('test-model'))).status, 200);
    const detail = await recorded(run.id, 1);
    assert.deepEqual([detail.spans.length, detail.rewards.length], [1, 0]);
    assert.equal(detail.spans[0]!.attributes['lightning.call_index'], 1, 'rejected requests are not numbered as calls');
    assert.equal((await post(`${run.url}/v1/metrics`, '{}')).status, 200);
  });

  test('SSE is passed through chunk by chunk: the agent has the first chunk before the upstream sends the second', async () => {
    const run = await newRun();
    const before = upstream.requests.length;
    const chunks: string[] = [];
    const done = new Promise<void>((resolve, reject) => {
      const request = http.request(
        `${run.url}/v1/chat/completions`,
        { method: 'POST', headers: { 'content-type': 'application/json' } },
        (response) => {
          assert.equal(response.headers['content-type'], 'text/event-stream');
          response.setEncoding('utf8').on('data', (chunk: string) => {
            chunks.push(chunk);
            upstream.release();
          });
          response.on('end', resolve);
        },
      );
      request.on('error', reject);
      request.end(chat('gated', { stream: true }));
    });
    // The upstream sends each chunk only after the agent has received the previous one, so a proxy
    // that buffered would never finish this stream.
    await Promise.race([
      done,
      new Promise((_, reject) =>
        setTimeout(() => reject(new Error('the stream stalled: the proxy buffers')), 5_000).unref(),
      ),
    ]);
    assert.ok(upstream.requests.length > before);
    assert.ok(chunks.length >= 8, `the agent received the stream in pieces (${chunks.length})`);
    assert.ok(chunks.join('').includes('data: [DONE]'));
    const { spans } = await recorded(run.id, 1);
    const message = (responseOf(spans[0]!).choices as Array<{ message: { content: string } }>)[0]!.message;
    assert.equal(message.content, ANSWER);
  });

  test('parallel tool-call deltas are merged by index; engine token ids are recorded', async () => {
    const run = await newRun();
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: {} } }];
    const streamed = await post(`${run.url}/v1/chat/completions`, chat('parallel', { stream: true, tools }));
    assert.equal(streamed.status, 200);
    const plain = await post(`${run.url}/v1/chat/completions`, chat('test-model', { return_token_ids: true }));
    assert.equal(JSON.parse(plain.body).choices[0].token_ids.length, 2, 'the agent sees the body unchanged');
    const [parallel, withIds] = (await recorded(run.id, 2)).spans as [Span, Span];
    const calls = (
      responseOf(parallel).choices as Array<{
        message: { tool_calls: Array<{ id: string; function: { arguments: string } }> };
        finish_reason: string;
      }>
    )[0]!;
    assert.deepEqual(
      calls.message.tool_calls.map((c) => [c.id, JSON.parse(c.function.arguments).city]),
      [
        ['call_paris', 'Paris'],
        ['call_oslo', 'Oslo'],
      ],
    );
    assert.equal(calls.finish_reason, 'tool_calls');
    assert.deepEqual(withIds.attributes['lightning.prompt_token_ids'], [1, 2, 3]);
    assert.deepEqual(withIds.attributes['lightning.response_token_ids'], [4, 5]);
  });

  test('a client that disconnects mid-stream aborts the upstream request; the call is recorded as cancelled', async () => {
    const run = await newRun();
    await new Promise<void>((resolve, reject) => {
      const request = http.request(
        `${run.url}/v1/chat/completions`,
        { method: 'POST', headers: { 'content-type': 'application/json' } },
        (response) => {
          response.once('data', () => {
            request.destroy();
            resolve();
          });
        },
      );
      request.on('error', () => {});
      request.on('close', resolve);
      request.end(chat('gated', { stream: true }));
      setTimeout(() => reject(new Error('no first chunk')), 5_000).unref();
    });
    await upstream.aborted;
    const span = await waitFor(
      async () => (await client.request('getRollout', { id: run.id })).spans[0],
      'the cancelled call',
    );
    assert.equal(span.statusCode, 'error');
    assert.match(span.statusMessage!, /cancelled: the client disconnected/);
  });

  test("the agent's own key goes upstream; without one (or with the placeholder) the daemon's key does; neither is stored", async () => {
    const run = await newRun();
    const sent = (): string | undefined => upstream.requests.at(-1)!.headers.authorization;
    await post(`${run.url}/v1/chat/completions`, chat('test-model'), {
      'content-type': 'application/json',
      authorization: `Bearer ${USER_KEY}`,
    });
    assert.equal(sent(), `Bearer ${USER_KEY}`);
    await post(`${run.url}/v1/chat/completions`, chat('test-model'));
    assert.equal(sent(), `Bearer ${DAEMON_KEY}`);
    await post(`${run.url}/v1/chat/completions`, chat('test-model'), {
      'content-type': 'application/json',
      authorization: 'Bearer lightning-placeholder-key',
    });
    assert.equal(sent(), `Bearer ${DAEMON_KEY}`);
    const detail = await recorded(run.id, 3);
    const text = JSON.stringify(detail);
    assert.ok(!text.includes(USER_KEY) && !text.includes(DAEMON_KEY), 'no key in the record');
    assert.ok(!daemon.stderr().includes('sk-'), 'no key in the logs');
  });

  test('a rollout started with tokenIds asks the engine for token ids and logprobs on every call; the agent request is recorded as sent', async () => {
    const { rollout, url } = await client.request('startAgentRun', { tokenIds: true });
    const response = await post(`${url}/v1/chat/completions`, chat('test-model'));
    assert.equal(response.status, 200);
    const forwarded = upstream.requests.at(-1)!.body!;
    assert.equal(forwarded.return_token_ids, true);
    assert.equal(forwarded.logprobs, true);
    const [span] = (await recorded(rollout.id, 1)).spans as [Span];
    assert.equal(requestOf(span).return_token_ids, undefined, 'the record holds what the agent sent');
    assert.equal(span.attributes['lightning.engine_token_ids_requested'], true);
    assert.deepEqual(span.attributes['lightning.prompt_token_ids'], [1, 2, 3]);
    assert.deepEqual(span.attributes['lightning.response_token_ids'], [4, 5]);
  });

  test('models, embeddings and legacy completions are proxied; the agent reads its task', async () => {
    const { rollout, url } = await client.request('startAgentRun', { task: { id: 't1', input: { q: 'hi' } } });
    const models = await new Promise<number>((resolve) =>
      http.get(`${url}/v1/models`, (r) => (r.resume(), resolve(r.statusCode ?? 0))),
    );
    assert.equal(models, 200);
    assert.equal((await post(`${url}/v1/embeddings`, JSON.stringify({ model: 'e', input: 'x' }))).status, 200);
    assert.equal(
      JSON.parse((await post(`${url}/v1/completions`, JSON.stringify({ model: 'c', prompt: '2+2=' }))).body).choices[0]
        .text,
      ' 4',
    );
    const task = await new Promise<string>((resolve) =>
      http.get(`${url}/task`, (r) => {
        let s = '';
        r.on('data', (c) => (s += c));
        r.on('end', () => resolve(s));
      }),
    );
    assert.deepEqual(JSON.parse(task), { id: 't1', input: { q: 'hi' } });
    const detail = await recorded(rollout.id, 2);
    assert.deepEqual(
      detail.spans.map((s) => [s.category, s.attributes['lightning.api']]),
      [
        ['other', 'embeddings'],
        ['llm', 'completions'],
      ],
    );
    assert.equal(detail.rollout.llmCalls, 1);
  });
});

test('Ctrl-C on lightning run stops the agent and marks the rollout cancelled (exit 130)', async (t) => {
  const cwd = tempDir(t);
  const child = spawn(
    process.execPath,
    [CLI, 'run', '--', process.execPath, '-e', 'console.log("agent up"); setInterval(() => {}, 1000)'],
    { cwd, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  await waitFor(() => stdout.includes('agent up'), 'the agent to start');
  child.kill('SIGINT');
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 130, stderr);
  const last = JSON.parse(stderr.trim().split('\n').at(-1)!) as { status: string; id: string };
  assert.equal(last.status, 'cancelled');
  const shown = JSON.parse((await runCli(['show', last.id, '--json'], { cwd })).stdout) as {
    rollout: { error: string };
  };
  assert.equal(shown.rollout.error, 'stopped by SIGINT');
});

test('lightning run uses the daemon that owns the store when one runs', async (t) => {
  const cwd = tempDir(t);
  const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const child = spawn(process.execPath, [CLI, 'run', '--', 'node', path.join(AGENTS, 'openai-agent.mjs'), 'chat'], {
    cwd,
    env: { ...process.env, OPENAI_BASE_URL: '', OPENAI_API_KEY: USER_KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, stderr);
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const page = await client.request('listRollouts', {});
  assert.equal(page.items.length, 1);
  assert.equal(page.items[0]!.llmCalls, 2);
});
