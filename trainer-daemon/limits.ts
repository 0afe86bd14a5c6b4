/**
 * The daemon's limits an operator may change with an environment variable, read once as the daemon starts
 * (`limitsFromEnv`) and handed to the parts that keep them; docs/guarantees.md says what each one bounds and what a
 * client sees past it. A variable that is not a positive whole number leaves the default.
 */
import { DEFAULT_MAX_BUFFERED_BYTES as DEFAULT_IN_FLIGHT_BYTES } from './capture/byteBudget';
import { DEFAULT_PROXY_LIMITS, type ProxyLimits } from './capture/proxy';
import { DEFAULT_MAX_BODY_BYTES } from './capture/agentRoutes';
import { DEFAULT_MAX_BUFFERED_BYTES as DEFAULT_RPC_BUFFERED_BYTES } from './rpc/server';
import { DEFAULT_DECODE_WORKER_HEAP_MB } from './otlp/decodePool';
import { defaultConnectionCap } from './server/http';

export interface DaemonLimits extends ProxyLimits {
  /** Bytes of request bodies and held answers in flight at once, over all calls (LIGHTNING_MAX_BUFFERED_BYTES). */
  readonly inFlightBytes: number;
  /** One OTLP export's bytes, inflated (LIGHTNING_MAX_OTLP_BYTES). */
  readonly maxOtlpBytes: number;
  /** Each OTLP decode worker's JavaScript heap, in MiB (LIGHTNING_OTLP_WORKER_HEAP_MB). */
  readonly otlpWorkerHeapMb: number;
  /** Bytes queued to one slow RPC client before it is dropped (LIGHTNING_RPC_MAX_BUFFERED_BYTES). */
  readonly rpcMaxBufferedBytes: number;
  /** How long a client may take to send a request's headers (LIGHTNING_HEADERS_TIMEOUT_MS). */
  readonly headersTimeoutMs: number;
  /**
   * How long the runners of rollouts a dead daemon left running get to come back before those rollouts are failed
   * (LIGHTNING_ORPHAN_GRACE_MS; 0 allowed).
   */
  readonly orphanGraceMs: number;
  /** Client connections held at once on each listener (LIGHTNING_MAX_CONNECTIONS; default from the open-file limit). */
  readonly maxConnections: number;
}

const FIXED_DEFAULTS: Omit<DaemonLimits, 'maxConnections'> = {
  ...DEFAULT_PROXY_LIMITS,
  inFlightBytes: DEFAULT_IN_FLIGHT_BYTES,
  maxOtlpBytes: DEFAULT_MAX_BODY_BYTES * 4,
  otlpWorkerHeapMb: DEFAULT_DECODE_WORKER_HEAP_MB,
  rpcMaxBufferedBytes: DEFAULT_RPC_BUFFERED_BYTES,
  headersTimeoutMs: 10_000,
  orphanGraceMs: 60_000,
};

/** The defaults: fixed numbers, and a connection cap worked out from this process's open-file limit. */
export function defaultLimits(): DaemonLimits {
  return { ...FIXED_DEFAULTS, maxConnections: defaultConnectionCap() };
}

/** Each limit's variable. */
const VARIABLES: Record<keyof DaemonLimits, string> = {
  maxCallsPerRollout: 'LIGHTNING_MAX_CALLS_PER_ROLLOUT',
  upstreamQueueTimeoutMs: 'LIGHTNING_UPSTREAM_QUEUE_TIMEOUT_MS',
  maxSseEventChars: 'LIGHTNING_MAX_SSE_EVENT_CHARS',
  maxUpstreamBodyBytes: 'LIGHTNING_MAX_UPSTREAM_BODY_BYTES',
  inFlightBytes: 'LIGHTNING_MAX_BUFFERED_BYTES',
  maxOtlpBytes: 'LIGHTNING_MAX_OTLP_BYTES',
  otlpWorkerHeapMb: 'LIGHTNING_OTLP_WORKER_HEAP_MB',
  rpcMaxBufferedBytes: 'LIGHTNING_RPC_MAX_BUFFERED_BYTES',
  headersTimeoutMs: 'LIGHTNING_HEADERS_TIMEOUT_MS',
  orphanGraceMs: 'LIGHTNING_ORPHAN_GRACE_MS',
  maxConnections: 'LIGHTNING_MAX_CONNECTIONS',
};

/** The limits `env` sets, each else its default. */
export function limitsFromEnv(env: NodeJS.ProcessEnv, defaults: DaemonLimits = defaultLimits()): DaemonLimits {
  const read = (key: keyof DaemonLimits): number => {
    const raw = env[VARIABLES[key]]?.trim();
    const value = raw ? Number(raw) : NaN;
    // Counts, bytes and milliseconds: whole numbers.
    return Number.isInteger(value) && (value > 0 || (value === 0 && key === 'orphanGraceMs')) ? value : defaults[key];
  };
  const limits: { -readonly [K in keyof DaemonLimits]: number } = { ...defaults };
  for (const key of Object.keys(VARIABLES) as Array<keyof DaemonLimits>) limits[key] = read(key);
  return limits;
}
