import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { z } from 'zod';
import {
  Methods,
  Notifications,
  ReadyMessage,
  Rollout,
  SpanInput,
  describeIssues,
} from '../../trainer-daemon/protocol';
import { createLogger } from '../../trainer-daemon/log';
import { canRetry, hasEnded, hasOutcome, isFinal, isResumable } from '../../trainer-daemon/protocol/status';
import { llmSpan } from '../helpers/spans';

describe('protocol', () => {
  test('every method and notification is namespaced under lightning/ and declared once', () => {
    const names = [...Object.values(Methods), ...Object.values(Notifications)].map((spec) => spec.method);
    assert.ok(names.every((name) => name.startsWith('lightning/')));
    assert.equal(new Set(names).size, names.length);
    for (const required of [
      'rollouts/list',
      'rollouts/get',
      'spans/list',
      'rewards/add',
      'rewards/list',
      'stats/get',
      'rollouts/changed',
      'spans/added',
    ]) {
      assert.ok(names.includes(`lightning/${required}`), `missing ${required}`);
    }
  });

  test('params are strict: unknown fields are refused by name rather than ignored', () => {
    const parsed = Methods.addReward.params.safeParse({ rolloutId: 'ro-1', value: 1, valeu: 2 });
    assert.ok(!parsed.success);
    assert.match(describeIssues(parsed.error, 'params'), /valeu/);
  });

  test('defaults make the minimal call complete: a reward is a human episode reward named reward', () => {
    assert.deepEqual(Methods.addReward.params.parse({ rolloutId: 'ro-1', value: 0.5 }), {
      rolloutId: 'ro-1',
      spanId: null,
      name: 'reward',
      value: 0.5,
      source: 'human',
      author: null,
      comment: null,
      reason: null,
    });
    assert.deepEqual(Methods.listRollouts.params.parse({}), { order: 'newest', limit: 50 });
  });

  test('rewards must be finite numbers; span ids and trace ids are OTel hex', () => {
    for (const value of [Number.NaN, Infinity, '1'])
      assert.ok(!Methods.addReward.params.safeParse({ rolloutId: 'r', value }).success);
    assert.ok(SpanInput.safeParse(llmSpan()).success);
    const bad = SpanInput.safeParse(llmSpan({ traceId: 'XYZ' }));
    assert.ok(!bad.success);
    assert.equal(describeIssues(bad.error, 'span'), 'span.traceId: traceId must be 32 lowercase hex characters');
  });

  test('describeIssues names the path of each problem', () => {
    const schema = z.object({ a: z.object({ b: z.array(z.number()) }) });
    const result = schema.safeParse({ a: { b: [1, 'x'] } });
    assert.ok(!result.success);
    assert.match(describeIssues(result.error, 'params'), /^params\.a\.b\.1: /);
  });

  test('the ready line schema matches the contract in docs/daemon.md', () => {
    assert.ok(
      ReadyMessage.safeParse({
        event: 'ready',
        url: 'http://127.0.0.1:4000',
        token: 'x'.repeat(43),
        store: '/s.db',
        pid: 42,
      }).success,
    );
    assert.ok(
      !ReadyMessage.safeParse({ event: 'ready', url: 'http://127.0.0.1:4000', store: '/s.db', pid: 42 }).success,
    );
    assert.deepEqual(
      Object.keys(ReadyMessage.shape).sort(),
      ['event', 'pid', 'store', 'token', 'url'],
      'exactly the fields docs/daemon.md names',
    );
    assert.ok(
      !ReadyMessage.safeParse({ event: 'startup-failed', reason: 'store_owned', kind: 'conflict', message: 'x' })
        .success,
      'a startup-failed line is not a ready line',
    );
    assert.ok(
      Rollout.shape.reward.safeParse(null).success &&
        Rollout.shape.reward.safeParse(0.5).success &&
        !Rollout.shape.reward.safeParse('1').success,
      "a rollout's reward: a number, or null when unrated",
    );
  });

  test('the daemon logger writes JSON lines and never writes credentials', () => {
    const lines: string[] = [];
    const log = createLogger('test', { write: (line) => lines.push(line), level: 'debug' });
    log.child('rpc').warn('refused', { authorization: 'Bearer sk-secret', apiKey: 'sk-123', count: 2 });
    const record = JSON.parse(lines[0]!) as Record<string, unknown>;
    assert.equal(record.component, 'test.rpc');
    assert.equal(record.count, 2);
    assert.equal(record.authorization, '[redacted]');
    assert.equal(record.apiKey, '[redacted]');
    assert.ok(!lines[0]!.includes('sk-'));
  });

  test('what "finished" means, in one place: ended, ran to an outcome, retried, final, resumable', () => {
    assert.deepEqual(Rollout.shape.status.options.filter(hasEnded), ['succeeded', 'failed', 'cancelled', 'timeout']);
    assert.deepEqual(
      Rollout.shape.status.options.filter(hasOutcome),
      ['succeeded', 'failed', 'timeout'],
      'a cancelled rollout is not scored or trained on',
    );
    assert.deepEqual(
      Rollout.shape.status.options.filter((status) => canRetry({ status, attemptCount: 1, maxAttempts: 2 })),
      ['failed', 'timeout'],
    );
    assert.ok(!canRetry({ status: 'failed', attemptCount: 2, maxAttempts: 2 }), 'no attempts left');
    assert.deepEqual((['queued', 'running', 'succeeded', 'failed', 'cancelled'] as const).filter(isFinal), [
      'succeeded',
      'failed',
      'cancelled',
    ]);
    assert.deepEqual(
      (['queued', 'running', 'succeeded', 'failed', 'cancelled'] as const).filter((status) =>
        isResumable({ algorithm: 'grpo', status }),
      ),
      ['failed', 'cancelled'],
    );
    assert.ok(!isResumable({ algorithm: 'apo', status: 'failed' }), 'APO runs are run again, not resumed');
  });
});
