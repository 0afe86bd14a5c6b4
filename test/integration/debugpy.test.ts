// needs: venv
/**
 * Debug with Lightning on a Python agent, with the real debugpy adapter (`python -m debugpy.adapter`,
 * what test/fixtures/debugpy-extension launches for the `debugpy` debug type): the launch
 * configuration instrumented as the extension does it, spoken to over the Debug Adapter Protocol as
 * VS Code does — a breakpoint is hit, the agent's calls are recorded, and the exit code comes from the
 * adapter's `exited` event. (The same inside code-server is the e2e suite's to add.)
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { finalStatus, instrumentConfig, type LaunchConfig } from '../../extension/debug/launchConfig';
import { debugRoute } from '../../extension/debug/route';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { REPO_ROOT, startDaemon } from '../helpers/daemon';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir, waitFor } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'stdlib_agent.py');

function pythonWithDebugpy(): string {
  const interpreter = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    interpreter,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt installed (npm test provisions .cache/venv)',
  );
  try {
    execFileSync(interpreter, ['-c', 'import debugpy'], { stdio: 'pipe' });
  } catch {
    assert.fail(`${interpreter} lacks debugpy: pip install -r trainer-daemon/python/requirements-test.txt`);
  }
  return interpreter;
}

type Message = {
  seq: number;
  type: 'request' | 'response' | 'event';
  command?: string;
  event?: string;
  request_seq?: number;
  success?: boolean;
  message?: string;
  body?: Record<string, unknown>;
};

/** A minimal DAP client over an adapter's stdio (Content-Length framing), recording every message. */
class DapClient {
  readonly messages: Message[] = [];
  private buffer = Buffer.alloc(0);
  private seq = 0;
  private readonly waiters: Array<{ match: (m: Message) => boolean; resolve: (m: Message) => void }> = [];

  constructor(private readonly adapter: ChildProcessWithoutNullStreams) {
    adapter.stdout.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      for (;;) {
        const header = this.buffer.indexOf('\r\n\r\n');
        if (header === -1) return;
        const length = Number(/Content-Length: (\d+)/i.exec(this.buffer.subarray(0, header).toString())?.[1]);
        if (this.buffer.length < header + 4 + length) return;
        const message = JSON.parse(this.buffer.subarray(header + 4, header + 4 + length).toString('utf8')) as Message;
        this.buffer = this.buffer.subarray(header + 4 + length);
        this.messages.push(message);
        for (const waiter of [...this.waiters]) {
          if (waiter.match(message)) {
            this.waiters.splice(this.waiters.indexOf(waiter), 1);
            waiter.resolve(message);
          }
        }
      }
    });
  }

  /** Sends a request; resolves with its response (a failed one rejects with the adapter's message). */
  request(command: string, args: Record<string, unknown> = {}): Promise<Message> {
    const seq = ++this.seq;
    const body = JSON.stringify({ seq, type: 'request', command, arguments: args });
    this.adapter.stdin.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    return this.next((m) => m.type === 'response' && m.request_seq === seq).then((response) => {
      if (!response.success) throw new Error(`${command} failed: ${response.message}`);
      return response;
    });
  }

  /** The first message (already received or still to come) that matches. */
  next(match: (m: Message) => boolean, what = 'a DAP message', timeoutMs = 60_000): Promise<Message> {
    const seen = this.messages.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `no ${what} within ${timeoutMs} ms; got ${this.messages.map((m) => m.event ?? m.command).join(', ')}`,
            ),
          ),
        timeoutMs,
      );
      timer.unref();
      this.waiters.push({ match, resolve: (m) => (clearTimeout(timer), resolve(m)) });
    });
  }

  event(name: string): Promise<Message> {
    return this.next((m) => m.type === 'event' && m.event === name, `"${name}" event`);
  }
}

test('Debug with Lightning on a Python agent under debugpy: breakpoint hit, rollout recorded, exit code from the adapter', async (t) => {
  const python = pythonWithDebugpy();
  const upstream = await startScriptedUpstream();
  const cwd = tempDir(t);
  const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'), ['--upstream', upstream.url], {
    OPENAI_BASE_URL: '',
    OPENAI_API_KEY: '',
  });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
    await upstream.close();
  });

  // What the extension does in resolveDebugConfigurationWithSubstitutedVariables.
  const launch: LaunchConfig = {
    type: 'debugpy',
    request: 'launch',
    name: 'Python agent',
    program: AGENT,
    console: 'internalConsole',
    python,
    lightning: true,
  };
  const run = await client.request('startAgentRun', {
    mode: 'debug',
    label: launch.name,
    source: { kind: 'launch', name: launch.name },
    ...debugRoute(launch, {}, null),
  });
  const config = instrumentConfig(launch, run, { PATH: process.env.PATH });

  const adapter = spawn(python, ['-m', 'debugpy.adapter'], { stdio: 'pipe' });
  t.after(() => adapter.kill());
  const dap = new DapClient(adapter);
  await dap.request('initialize', {
    clientID: 'lightning-test',
    adapterID: 'debugpy',
    linesStartAt1: true,
    columnsStartAt1: true,
    pathFormat: 'path',
  });
  const launched = dap.request('launch', { ...config, justMyCode: true });
  await dap.event('initialized');
  const line =
    fs
      .readFileSync(AGENT, 'utf8')
      .split('\n')
      .findIndex((text) => text.includes('message = reply["choices"][0]["message"]')) + 1;
  const set = await dap.request('setBreakpoints', { source: { path: AGENT }, breakpoints: [{ line }] });
  assert.equal((set.body!.breakpoints as Array<{ verified: boolean }>)[0]!.verified, true);
  await dap.request('configurationDone');
  await launched;

  const stopped = await dap.event('stopped');
  assert.equal(stopped.body!.reason, 'breakpoint');
  const frames = await dap.request('stackTrace', { threadId: stopped.body!.threadId });
  assert.equal((frames.body!.stackFrames as Array<{ line: number }>)[0]!.line, line, 'stopped on the breakpoint');
  // Paused at the first reply: the first call is already recorded, while the agent is stopped.
  await waitFor(
    async () =>
      (await client.request('listSpans', { rolloutId: run.rollout.id })).items.some((s) => s.category === 'llm'),
    'the first LLM call recorded',
  );
  await dap.request('setBreakpoints', { source: { path: AGENT }, breakpoints: [] });
  await dap.request('continue', { threadId: stopped.body!.threadId });

  const exited = await dap.event('exited');
  assert.equal(exited.body!.exitCode, 0);
  await dap.event('terminated');
  const output = dap.messages
    .filter((m) => m.event === 'output')
    .map((m) => String(m.body!.output))
    .join('');
  assert.match(output, /ANSWER: It is sunny in Paris\./);

  // What the extension does when the session ends: the exit code decides the status.
  const finished = await client.request('transitionRollout', {
    id: run.rollout.id,
    ...finalStatus(exited.body!.exitCode as number),
    exitCode: exited.body!.exitCode,
  });
  assert.equal(finished.status, 'succeeded');
  const detail = await client.request('getRollout', { id: run.rollout.id });
  assert.equal(detail.spans.filter((s) => s.category === 'llm').length, 2);
  assert.equal(detail.rollout.reward, 1, 'the agent posted its reward');
});
