/**
 * The implementation of every RPC method, in one table. The RPC server serves it over WebSocket;
 * the CLI calls the same table directly on the store when no daemon runs, so both paths behave
 * the same.
 */
import {
  Methods,
  describeIssues,
  type MethodName,
  type ParsedParamsOf,
  type ResultOf,
  type DaemonInfo,
} from '../protocol';
import { ConflictError, InvalidInputError } from '../protocol/errors';
import { assertNever } from '../protocol/assert';
import { registerSecretValue } from '../protocol/secrets';
import type { Store } from '../store/store';
import type { WriteQueue } from '../store/writeQueue';
import { validateSpans, type StoredSpanResult } from '../store/spans';
import { slimSpan } from '../protocol/slimSpan';
import { scoreRollouts, ScoreJobs } from '../rewards/job';
import { proxyJudgeTransport } from '../rewards/judgeTransport';
import type { Broadcast } from './notifier';
import { rolloutTransitions } from '../lightningrl/rolloutView';
import { datasetAgents } from '../lightningrl/agentNames';
import type { TrainingManager } from '../training/manager';
import { TrainingService } from '../training/service';
import type { WorkerBatches } from '../runner/workerBatches';
import type { PolicyServing } from '../training/policyServing';
import { exportCheckpoint } from '../training/exportCheckpoint';
import { createLogger, type Logger } from '../log';

export type Handlers = {
  [M in MethodName]: (params: ParsedParamsOf<M>) => ResultOf<M> | Promise<ResultOf<M>>;
};

export interface HandlerContext {
  readonly store: Store;
  /** Group-commits writes across concurrent calls; without one, each call writes its own transaction. */
  readonly writes?: WriteQueue;
  readonly info: () => DaemonInfo;
  /** The daemon's base URL for agent capability URLs; absent when no daemon serves HTTP. */
  readonly agentBaseUrl?: () => string | undefined;
  /** Every base URL the agent routes are served at (loopback, and --host's): an upstream there would loop. */
  readonly ownUrls?: () => readonly string[];
  /** Sends a notification to every connected client (progress of long jobs); absent without a server. */
  readonly notify?: Broadcast;
  /** Score jobs in flight, for `rewards/cancel` and shutdown. */
  readonly scoreJobs?: ScoreJobs;
  /** Worker-mode batches; absent when no daemon serves HTTP. */
  readonly workerBatches?: WorkerBatches;
  /** Runs training loops; absent when no daemon serves (the CLI's store-direct path). */
  readonly training?: TrainingManager;
  /** What training reads and writes (the loops' service); default: one over `store` and `writes`. */
  readonly trainingService?: TrainingService;
  /** Serves a checkpoint outside training; absent when no daemon serves (the CLI's store-direct path). */
  readonly policy?: PolicyServing;
  /**
   * Where work the handlers start themselves logs (a checkpoint's export); default: JSON lines on stderr, warnings up.
   */
  readonly logger?: Logger;
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** Whether `upstream` is one of this daemon's own rollout or batch URLs (`/r/…`, `/b/…`): a call sent there loops. */
function loopsBack(upstream: string, agentBaseUrl: string): boolean {
  let target: URL;
  try {
    target = new URL(upstream);
  } catch {
    return false;
  }
  const self = new URL(agentBaseUrl);
  const sameHost =
    target.hostname === self.hostname || (LOOPBACK_HOSTS.has(target.hostname) && LOOPBACK_HOSTS.has(self.hostname));
  return sameHost && target.port === self.port && /^\/(r|b)\//.test(target.pathname);
}

export function createHandlers({
  store,
  writes,
  info,
  agentBaseUrl,
  ownUrls,
  notify,
  scoreJobs = new ScoreJobs(),
  workerBatches,
  training,
  trainingService = new TrainingService(store, writes),
  policy,
  logger = createLogger('checkpoints', { level: 'warn' }),
}: HandlerContext): Handlers {
  const write = <T>(op: () => T, units = 1): T | Promise<T> => (writes ? writes.submit(op, units) : op());
  const servingBatches = (): WorkerBatches => {
    if (!workerBatches)
      throw new ConflictError(
        'worker batches need a running daemon to serve their workers; start one with `lightning serve`',
      );
    return workerBatches;
  };
  return {
    daemonInfo: () => info(),
    listRollouts: (params) => store.listRollouts(params),
    rolloutGroups: (params) => store.rolloutGroups(params),
    getRollout: ({ id, spans, spanLimit }) => store.getRolloutDetail(store.resolveRolloutId(id), { spans, spanLimit }),
    createRollout: (params) => write(() => store.createRollout(params)),
    transitionRollout: (params) => {
      const id = store.resolveRolloutId(params.id);
      return write(() => store.transitionRollout({ ...params, id }));
    },
    startAgentRun: ({ upstream, tokenIds, providerUpstreams, rolloutId, key: reused, ...params }) => {
      const baseUrl = agentBaseUrl?.();
      if (!baseUrl)
        throw new ConflictError(
          'agent runs need a running daemon to serve their LLM calls; start one with `lightning serve`',
        );
      for (const target of [upstream, ...Object.values(providerUpstreams)])
        if (target && (ownUrls?.() ?? [baseUrl]).some((own) => loopsBack(target, own)))
          throw new InvalidInputError(
            `upstream ${new URL(target).origin}/${new URL(target).pathname.split('/')[1]}/… is this daemon's own rollout URL (a capability URL: its key is not repeated here): the calls would come back to it without end. Name the LLM server the agent should reach (its own OPENAI_BASE_URL before Lightning), or none for the daemon's upstream`,
          );
      return write(() => {
        const { rollout, key } = store.startAgentRun(
          rolloutId === undefined ? params : store.resolveRolloutId(rolloutId),
          { upstream, tokenIds, providerUpstreams, ...(reused === undefined ? {} : { key: reused }) },
        );
        return { rollout, url: `${baseUrl}/r/${key}` };
      });
    },
    addSpans: async ({ rolloutId, spans }) => {
      const { valid, validIndexes, results } = validateSpans(spans);
      if (valid.length === 0) store.getRollout(rolloutId);
      let written: StoredSpanResult[] = [];
      if (valid.length > 0)
        written = writes
          ? await writes.submitSpans(rolloutId, valid)
          : store.addSpans({ rolloutId, spans: valid }).results;
      written.forEach((result, k) => (results[validIndexes[k]!] = result));
      return { results };
    },
    listSpans: ({ rolloutId, afterSequence, limit, slim }) => {
      const items = store.listSpans(store.resolveRolloutId(rolloutId), afterSequence, limit);
      return { items: slim ? items.map(slimSpan) : items };
    },
    addReward: (params) => {
      const rolloutId = store.resolveRolloutId(params.rolloutId);
      return write(() => store.addReward({ ...params, rolloutId }));
    },
    listRewards: ({ rolloutId }) => ({ items: store.listRewards(store.resolveRolloutId(rolloutId)) }),
    getStats: () => store.stats(),
    importDataset: (params) => write(() => store.importDataset(params)),
    listDatasets: () => ({ items: store.listDatasets() }),
    listTasks: ({ dataset, split }) => trainingService.tasks(dataset, split),
    datasetAgents: (params) => datasetAgents(store, params),
    listResources: () => ({ items: store.listResources() }),
    getResource: ({ name, version }) => store.getResource(name, version),
    putResource: (params) => write(() => store.putResource(params)),
    setCurrentResource: ({ name, version }) => write(() => store.setCurrentResource(name, version)),
    listTrainingRuns: ({ limit }) => ({ items: store.listTrainingRuns(limit) }),
    getTrainingRun: ({ id, afterStep }) => {
      const detail = store.getTrainingRun(id, afterStep);
      switch (detail.algorithm) {
        case 'grpo':
        case 'sft':
          // Each with its size on disk, and whether it keeps optimizer state.
          return { ...detail, checkpoints: trainingService.measuredCheckpoints(id) };
        case 'apo':
          return detail;
        default:
          return assertNever(detail);
      }
    },
    // The request is recorded (`cancelRequested`); a run this daemon drives stops now.
    cancelTrainingRun: async ({ id }) => {
      const requested = await write(() => store.cancelTrainingRun(id));
      return training?.isRunning(id) ? training.cancel(id) : requested;
    },
    scoreRollouts: async ({ jobId = `score-${Date.now()}`, apiKeys, ...params }) => {
      const signal = scoreJobs.start(jobId);
      // A judge's keys are the daemon's to redact wherever they turn up (its answers, the records of its calls).
      for (const key of Object.values(apiKeys)) registerSecretValue(key);
      try {
        const baseUrl = agentBaseUrl?.();
        const judge = baseUrl
          ? proxyJudgeTransport({ store, writes, agentBaseUrl: baseUrl, apiKeys, env: process.env, signal })
          : undefined;
        return await scoreRollouts(
          { store, writes, judge },
          { ...params, apiKeys },
          {
            signal,
            scorers: scoreJobs.scorers,
            onProgress: (progress) => notify?.('scoreProgress', { jobId, ...progress }),
          },
        );
      } finally {
        scoreJobs.end(jobId);
      }
    },
    cancelScore: ({ jobId }) => ({ cancelled: scoreJobs.cancel(jobId) }),
    rolloutTransitions: (params) => rolloutTransitions(store, params),
    openWorkerBatch: (params) => servingBatches().open(params),
    workerBatchEvents: ({ id, after, waitMs }) => servingBatches().events(id, after, waitMs),
    workerExited: ({ id, worker, error }) => servingBatches().workerExited(id, worker, error),
    workerPlaced: ({ id, worker, node }) => servingBatches().workerPlaced(id, worker, node),
    cancelWorkerBatch: async ({ id }) => ({ cancelled: await servingBatches().cancel(id) }),
    startTraining: (params) => {
      if (!training)
        throw new ConflictError(
          'training needs a running daemon; start one with `lightning serve` or use `lightning train`',
        );
      return training.start(params);
    },
    listCheckpoints: ({ runId }) => ({ items: trainingService.measuredCheckpoints(runId) }),
    exportCheckpoint: (params) => exportCheckpoint(trainingService, logger, params),
    deleteCheckpoint: ({ id }) => trainingService.deleteCheckpoint(id),
    servePolicy: (params) => {
      if (!policy)
        throw new ConflictError('serving a checkpoint needs a running daemon; start one with `lightning serve`');
      return policy.serve(params);
    },
    currentPolicy: () => ({ served: policy?.current ?? null }),
    stopPolicy: async () => ({ stopped: policy ? await policy.stop() : null }),
  };
}

/** Validates raw params against the method's schema; the error names the bad field. */
/** Deeper than this, params are refused before validation: a schema walk of 10,000 levels overflows the stack. */
const MAX_PARAMS_DEPTH = 64;

export function parseParams<M extends MethodName>(name: M, raw: unknown): ParsedParamsOf<M> {
  if (nestedDeeperThan(raw, MAX_PARAMS_DEPTH))
    throw new InvalidInputError(`params: nested deeper than ${MAX_PARAMS_DEPTH} levels; no method takes that`);
  const parsed = Methods[name].params.safeParse(raw ?? {});
  if (!parsed.success) throw new InvalidInputError(describeIssues(parsed.error, 'params'));
  return parsed.data as ParsedParamsOf<M>;
}

/** Whether a JSON value nests deeper than `limit`, checked without recursion. */
function nestedDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth >= limit) return true;
    for (const inner of Object.values(current))
      if (inner !== null && typeof inner === 'object') stack.push([inner, depth + 1]);
  }
  return false;
}

/** Calls a handler with validated params: what the server does per request, and the CLI's local path. */
export async function invoke<M extends MethodName>(handlers: Handlers, name: M, raw: unknown): Promise<ResultOf<M>> {
  const params = parseParams(name, raw);
  const handler = handlers[name] as (params: ParsedParamsOf<M>) => ResultOf<M> | Promise<ResultOf<M>>;
  return handler(params);
}
