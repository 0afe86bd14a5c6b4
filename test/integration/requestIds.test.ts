/**
 * An unexpected exception in one request fails that request only, logged with its id (issue 28): every answer
 * carries `x-request-id`, the daemon's JSON errors carry it as `request_id`, its log line names it, and the
 * next request is served. The daemon's HTTP server and agent routes run in this process, on a real socket and
 * store; what throws is the part a test can make fail: the server's route table (a synchronous throw) and the
 * worker-batch queue the agent routes call (an asynchronous one) — the daemon's own code has no such fault to
 * provoke from outside.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { AgentRoutes, type WorkerQueue } from '../../trainer-daemon/capture/agentRoutes';
import { PolicyRouter } from '../../trainer-daemon/capture/policyRoutes';
import { OverloadedError } from '../../trainer-daemon/protocol/errors';
import { defaultLimits } from '../../trainer-daemon/limits';
import { createLogger } from '../../trainer-daemon/log';
import { OtlpReceiver } from '../../trainer-daemon/otlp/receiver';
import { DaemonHttpServer, requestPath } from '../../trainer-daemon/server/http';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';

interface Answer {
  readonly status: number;
  readonly requestId: string | undefined;
  readonly body: string;
}

function request(url: string, method = 'GET', body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sent = http.request(
      url,
      { method, headers: body ? { 'content-type': 'application/json' } : {} },
      (response) => {
        let text = '';
        response.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            requestId: response.headers['x-request-id'] as string | undefined,
            body: text,
          }),
        );
      },
    );
    sent.on('error', reject);
    sent.end(body);
  });
}

function captureLogs(): { lines: Array<Record<string, unknown>>; logger: ReturnType<typeof createLogger> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('daemon', {
    write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  return { lines, logger };
}

test('a route that throws: that request gets a 500 with its id, the log line names the id, the next request is served', async (t) => {
  const { lines, logger } = captureLogs();
  const server = new DaemonHttpServer({
    logger,
    routes: (request) => {
      if (requestPath(request.url)?.pathname === '/throws') throw new Error('a fault inside a route');
      return false;
    },
    upgrades: {},
  });
  const { port } = await server.listen('127.0.0.1', 0);
  t.after(() => server.close());
  const base = `http://127.0.0.1:${port}`;

  const failed = await request(`${base}/throws?secret=1`);
  assert.equal(failed.status, 500);
  assert.match(failed.requestId ?? '', /^req_[A-Za-z0-9_-]{12}$/);
  const body = JSON.parse(failed.body) as { request_id: string; error: { message: string } };
  assert.equal(body.request_id, failed.requestId);
  assert.match(body.error.message, new RegExp(`logged with request id ${failed.requestId}`));
  const logged = lines.find((line) => line.msg === 'request handler failed');
  assert.ok(logged, JSON.stringify(lines));
  assert.equal(logged.requestId, failed.requestId);
  assert.equal(logged.path, '/throws', 'the path without its query');
  assert.equal(logged.error, 'a fault inside a route');

  const next = await request(`${base}/health`);
  assert.equal(next.status, 200);
  assert.ok(next.requestId && next.requestId !== failed.requestId, 'each request has its own id');
  const missing = await request(`${base}/nowhere`);
  assert.equal(missing.status, 404);
  assert.equal((JSON.parse(missing.body) as { request_id: string }).request_id, missing.requestId);
});

test('an agent route whose work fails unexpectedly: a 500 with its id in the body and the log (no capability key), the rollout goes on', async (t) => {
  const { lines, logger } = captureLogs();
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const writes = new WriteQueue(store, logger);
  const otlp = new OtlpReceiver(writes, 1024 * 1024, logger);
  t.after(() => otlp.close());
  // The batch queue's fault: what an unexpected exception deep in a route looks like to the routes.
  const brokenQueue: WorkerQueue = {
    knows: () => true,
    next: (_key, worker) =>
      Promise.reject(
        worker === 'busy'
          ? new OverloadedError('the batch queue is busy; retry shortly')
          : new Error('the batch queue broke'),
      ),
    owns: () => false,
    end: () => Promise.reject(new Error('unused')),
  };
  const agents = new AgentRoutes({
    store,
    writes,
    otlp,
    upstream: { baseUrl: 'http://127.0.0.1:9/v1', apiKey: undefined, timeoutMs: 1_000 },
    logger,
    workerBatches: brokenQueue,
    token: 'test-token-0123456789',
    policyRouter: new PolicyRouter(),
    limits: defaultLimits(),
  });
  const server = new DaemonHttpServer({
    logger,
    routes: (request, response) => agents.handle(request, response),
    upgrades: {},
  });
  const { port } = await server.listen('127.0.0.1', 0);
  t.after(() => server.close());
  const base = `http://127.0.0.1:${port}`;
  const { key } = store.startAgentRun(parsed('createRollout', {}), { upstream: null, tokenIds: false });
  const runnerKey = 'k'.repeat(24);

  const failed = await request(`${base}/b/${runnerKey}/w1/next`, 'POST');
  assert.equal(failed.status, 500, failed.body);
  const body = JSON.parse(failed.body) as { request_id: string; error: { message: string; type: string } };
  assert.equal(body.request_id, failed.requestId);
  assert.equal(body.error.message, 'the batch queue broke');
  const logged = lines.find((line) => line.msg === 'agent request failed');
  assert.ok(logged, JSON.stringify(lines));
  assert.equal(logged.requestId, failed.requestId);
  assert.equal(logged.path, '/b/…/w1/next');
  assert.doesNotMatch(JSON.stringify(lines), new RegExp(runnerKey));
  // A 503 (retry) is a warning with its id, not an error.
  const busy = await request(`${base}/b/${runnerKey}/busy/next`, 'POST');
  assert.equal(busy.status, 503, busy.body);
  const warned = lines.find((line) => line.requestId === busy.requestId);
  assert.deepEqual([warned?.level, warned?.msg], ['warn', 'agent request refused for now (503, retry)']);
  assert.equal(lines.filter((line) => line.level === 'error').length, 1, JSON.stringify(lines));

  const reward = await request(`${base}/r/${key}/reward`, 'POST', JSON.stringify({ value: 1 }));
  assert.equal(reward.status, 200, reward.body);
  assert.ok(reward.requestId && reward.requestId !== failed.requestId);
  const refused = await request(`${base}/r/${key}/reward`, 'POST', '{not json');
  assert.equal(refused.status, 400);
  assert.equal((JSON.parse(refused.body) as { request_id: string }).request_id, refused.requestId);
});
