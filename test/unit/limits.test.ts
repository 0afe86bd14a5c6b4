/** The daemon's limits from the environment (trainer-daemon/limits.ts): each variable, else the default. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultLimits, limitsFromEnv } from '../../trainer-daemon/limits';
import { defaultConnectionCap } from '../../trainer-daemon/server/http';

const DEFAULT_LIMITS = defaultLimits();

test('each limit comes from its variable, else its default', () => {
  assert.deepEqual(limitsFromEnv({}), DEFAULT_LIMITS);
  assert.equal(DEFAULT_LIMITS.maxConnections, defaultConnectionCap(), 'from the open-file limit');
  assert.equal(DEFAULT_LIMITS.maxUpstreamBodyBytes, 64 * 1024 * 1024);
  const set = limitsFromEnv({
    LIGHTNING_MAX_CALLS_PER_ROLLOUT: '3',
    LIGHTNING_UPSTREAM_QUEUE_TIMEOUT_MS: '250',
    LIGHTNING_MAX_SSE_EVENT_CHARS: '1024',
    LIGHTNING_MAX_BUFFERED_BYTES: '4194304',
    LIGHTNING_MAX_OTLP_BYTES: '1048576',
    LIGHTNING_OTLP_WORKER_HEAP_MB: '256',
    LIGHTNING_RPC_MAX_BUFFERED_BYTES: '65536',
    LIGHTNING_HEADERS_TIMEOUT_MS: '500',
    LIGHTNING_ORPHAN_GRACE_MS: '3000',
    LIGHTNING_MAX_UPSTREAM_BODY_BYTES: '1048576',
    LIGHTNING_MAX_CONNECTIONS: '64',
  });
  assert.deepEqual(set, {
    maxCallsPerRollout: 3,
    upstreamQueueTimeoutMs: 250,
    maxSseEventChars: 1024,
    inFlightBytes: 4_194_304,
    maxOtlpBytes: 1_048_576,
    otlpWorkerHeapMb: 256,
    rpcMaxBufferedBytes: 65_536,
    headersTimeoutMs: 500,
    orphanGraceMs: 3_000,
    maxUpstreamBodyBytes: 1_048_576,
    maxConnections: 64,
  });
});

test('a value that is not a positive whole number leaves the default; an orphan grace of 0 is allowed', () => {
  const limits = limitsFromEnv({
    LIGHTNING_MAX_CALLS_PER_ROLLOUT: '-5',
    LIGHTNING_UPSTREAM_QUEUE_TIMEOUT_MS: 'soon',
    LIGHTNING_MAX_SSE_EVENT_CHARS: ' ',
    LIGHTNING_MAX_BUFFERED_BYTES: '0',
    LIGHTNING_ORPHAN_GRACE_MS: '0',
    LIGHTNING_MAX_UPSTREAM_BODY_BYTES: 'lots',
    LIGHTNING_MAX_CONNECTIONS: '-1',
    LIGHTNING_HEADERS_TIMEOUT_MS: '2.5',
  });
  assert.equal(limits.maxCallsPerRollout, DEFAULT_LIMITS.maxCallsPerRollout);
  assert.equal(limits.upstreamQueueTimeoutMs, DEFAULT_LIMITS.upstreamQueueTimeoutMs);
  assert.equal(limits.maxSseEventChars, DEFAULT_LIMITS.maxSseEventChars);
  assert.equal(limits.inFlightBytes, DEFAULT_LIMITS.inFlightBytes);
  assert.equal(limits.maxUpstreamBodyBytes, DEFAULT_LIMITS.maxUpstreamBodyBytes);
  assert.equal(limits.maxConnections, DEFAULT_LIMITS.maxConnections);
  assert.equal(limits.headersTimeoutMs, DEFAULT_LIMITS.headersTimeoutMs, 'counts and times are whole numbers');
  assert.equal(limits.orphanGraceMs, 0);
});
