/**
 * The agent-facing HTTP surface under a rollout's capability URL `/r/<key>` (docs/agents.md,
 * "Agent-facing HTTP"): the OpenAI-compatible proxy, OTLP traces, rewards, the task and the
 * resources; and for worker-mode batches ("Batch rollouts") `POST /b/<key>/<worker>/next` and a
 * rollout's `POST /finish`. An unknown (or revoked) key is a 404 and nothing is stored.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { AddRewardParams, describeIssues, type Json, type Rollout } from '../protocol';
import crypto from 'node:crypto';
import { hasEnded } from '../protocol/status';
import { rememberRolloutSecrets, requestSecretValues } from '../protocol/secrets';
import { errorMessage, InvalidInputError, mapError, NotFoundError, UnauthorizedError } from '../protocol/errors';
import type { Logger } from '../log';
import { loggedPath, requestIdOf, requestPath, sendJson } from '../server/http';
import { markKeyed } from '../server/connectionSlots';
import type { Store } from '../store/store';
import type { WriteQueue } from '../store/writeQueue';
import type { Admission, OtlpReceiver } from '../otlp/receiver';
import { ExportCancelledError } from '../otlp/gunzip';
import { ByteBudget } from './byteBudget';
import { accountBody, closesAfterResponse, parseJsonBody, readBody } from './requestBody';
import { RecordingProxy, type ProxyLimits } from './proxy';
import type { CallRecorder, UpstreamConfig } from './proxyCall';
import { FinishBody } from '../protocol/runner';
import type { WorkerAssignment } from '../protocol/runner';
import type { Api } from './reassemble';
import {
  DEFAULT_PROVIDER_UPSTREAMS,
  errorBodyFor,
  providerPathAt,
  providerRoute,
  type ProviderRoute,
} from './providerRoutes';
import { TranslatingProxy } from './translate';
import { RolloutCallLimit } from './callLimit';
import { PolicyRouter } from './policyRoutes';
import type { AgentKeyRecord } from '../store/agentKeys';

/** What the worker-batch routes need of the daemon's queue (runner/workerBatches.ts), so capture imports no runner. */
export interface WorkerQueue {
  /**
   * The next rollout for `worker` of the batch with `key`, long-polled while `isOpen`; null when the batch has no more.
   */
  next(key: string, worker: string, isOpen: () => boolean): Promise<WorkerAssignment | null>;
  /** Whether `key` is an open batch's runner key. */
  knows(key: string): boolean;
  /** Whether the rollout was handed out by a worker batch (only those end with `/finish`). */
  owns(rolloutId: string): boolean;
  end(rolloutId: string, to: z.infer<typeof FinishBody>['status'], error: string | null): Promise<Rollout>;
}

export const DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024;

const PROXIED: Record<string, Api | null> = {
  'POST /chat/completions': 'chat.completions',
  'POST /completions': 'completions',
  'POST /responses': 'responses',
  'POST /embeddings': 'embeddings',
  'GET /models': null,
};

/**
 * `POST /reward`: the fields of `rewards/add` an agent gives (with their defaults); the rollout is the URL's, the
 * source `agent`.
 */
const RewardBody = AddRewardParams.pick({ value: true, name: true, spanId: true, comment: true });

export interface AgentRoutesOptions {
  readonly store: Store;
  readonly writes: WriteQueue;
  readonly upstream: UpstreamConfig;
  readonly logger: Logger;
  readonly maxBodyBytes?: number;
  readonly otlp: OtlpReceiver;
  /** Worker-mode batches: `POST /b/<key>/<worker>/next` and `POST /r/<key>/finish`. */
  readonly workerBatches?: WorkerQueue;
  /** The daemon's RPC token: one of the credentials the shared `POST /v1/traces` accepts. */
  readonly token: string;
  /** Where calls of a run with several policies go (its adapters): the daemon's one router, GRPO registers with it. */
  readonly policyRouter: PolicyRouter;
  /** The proxy's limits, and the bytes of bodies and held answers in flight at once (limits.ts). */
  readonly limits: ProxyLimits & { readonly inFlightBytes: number };
}

/**
 * How the proxies store a call's record: in the next group commit (the agent's answer waits on it), where the
 * write itself checks the rollout: a call answered after its attempt ended (the rollout's end, or a timeout and a
 * retry) is kept with that attempt, marked late and left out of training — never mixed in, even when the end is
 * committed in the same group just before it.
 */
export function callRecorder(store: Store, writes: WriteQueue, policyRouter: PolicyRouter): CallRecorder {
  return (span, owner) => {
    // A call of a run with several policies: its span names the adapter that answered (capture/policyRoutes.ts).
    policyRouter.stamp(span, owner.rolloutId);
    return writes.submit(() => store.addProxiedCall(owner, span));
  };
}

/** The header that carries a rollout key to the shared OTLP endpoint (e.g. through OTEL_EXPORTER_OTLP_HEADERS). */
export const ROLLOUT_KEY_HEADER = 'x-lightning-rollout-key';

export class AgentRoutes {
  private readonly proxy: RecordingProxy;
  private readonly translating: TranslatingProxy;
  /** Calls numbered in order of arrival within each rollout (continuing after a daemon restart). */
  private readonly callCounters = new Map<string, number>();
  private readonly maxBodyBytes: number;
  private readonly budget: ByteBudget;
  private readonly policyRouter: PolicyRouter;

  constructor(private readonly options: AgentRoutesOptions) {
    this.maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    this.budget = new ByteBudget(options.limits.inFlightBytes);
    this.policyRouter = options.policyRouter;
    const record = callRecorder(options.store, options.writes, this.policyRouter);
    const logger = options.logger.child('proxy');
    // A rollout's calls count together against its share, however they go out.
    const callLimit = new RolloutCallLimit(options.limits.maxCallsPerRollout);
    const { upstream, limits } = options;
    this.proxy = new RecordingProxy({ upstream, record, logger, budget: this.budget, limits, callLimit });
    this.translating = new TranslatingProxy({ upstream, record, logger, limits, callLimit });
  }

  /** Handles `/r/<key>/…` and the shared OTLP endpoints `/v1/{traces,metrics,logs}`; false for any other path. */
  handle(request: IncomingMessage, response: ServerResponse): boolean {
    const url = requestPath(request.url);
    if (!url) return false;
    accountBody(request, this.budget, response);
    const match = /^\/r\/([A-Za-z0-9_-]{16,64})(\/.*)?$/.exec(url.pathname);
    let work: Promise<void>;
    const runner = /^\/b\/([A-Za-z0-9_-]{16,64})\/([A-Za-z0-9_-]{1,32})\/next$/.exec(url.pathname);
    if (match) work = this.dispatch(match[1]!, match[2] ?? '/', url.search, request, response);
    else if (runner && request.method === 'POST') work = this.nextRollout(runner[1]!, runner[2]!, request, response);
    else if (request.method === 'POST' && /^\/v1\/(traces|metrics|logs)$/.test(url.pathname))
      work = this.sharedOtlpRoute(url.pathname, request, response);
    else return false;
    work.catch((error: unknown) => {
      const { httpStatus, kind } = mapError(error);
      const status = httpStatus;
      const requestId = requestIdOf(request);
      const fields = { requestId, method: request.method, path: loggedPath(request), error: errorMessage(error) };
      // A 503 is a "not now" the client retries (the write queue full, spans to scrub again, the daemon stopping):
      // a warning, not an error, so that an ingest's retries do not read as failures in the log.
      if (status === 503) this.options.logger.warn('agent request refused for now (503, retry)', fields);
      else if (status >= 500) this.options.logger.error('agent request failed', fields);
      const headers = {
        ...(closesAfterResponse(request) ? { connection: 'close' } : {}),
        ...(status === 503 ? { 'retry-after': '1' } : {}),
      };
      // An Anthropic or Gemini SDK reads errors in its provider's shape.
      const shape = match ? errorBodyFor(match[2] ?? '/', request.headers) : null;
      const body = shape
        ? shape(status, kind, errorMessage(error))
        : { error: { message: errorMessage(error), type: kind } };
      // `request_id` beside the error, where Anthropic's API puts its own.
      if (!response.headersSent) sendJson(response, status, { ...(body as object), request_id: requestId }, headers);
      else response.destroy();
    });
    return true;
  }

  /**
   * The shared `POST /v1/traces` (no capability URL): it writes only with a credential, never into
   * a finished rollout. A rollout key in the `x-lightning-rollout-key` header makes it that rollout's
   * endpoint; the daemon's RPC token lets spans go to the unfinished rollouts their resources name.
   */
  private async sharedOtlpRoute(path: string, request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (path !== '/v1/traces') return this.otlpRoute(null, path, request, response);
    const key = request.headers[ROLLOUT_KEY_HEADER];
    if (typeof key === 'string') {
      const agent = /^[A-Za-z0-9_-]{16,64}$/.test(key) ? this.options.store.findAgentKey(key) : undefined;
      if (!agent)
        throw new UnauthorizedError(
          `the ${ROLLOUT_KEY_HEADER} header names no running rollout of this daemon (an attempt that ended has its key revoked)`,
        );
      markKeyed(request);
      rememberRolloutSecrets(agent.rolloutId, requestSecretValues(request.headers));
      return this.otlpRoute(agent, path, request, response);
    }
    if (!bearerMatches(request.headers.authorization, this.options.token)) {
      throw new UnauthorizedError(
        `POST /v1/traces needs a credential: export to the rollout's own $LIGHTNING_URL/v1/traces (what lightning run sets), send its key in the ${ROLLOUT_KEY_HEADER} header, or the daemon's token as Authorization: Bearer`,
      );
    }
    markKeyed(request);
    return this.otlpRoute(null, path, request, response);
  }

  /**
   * OTLP/HTTP: traces are stored (partial success reported); metrics and logs are accepted unstored. `owner`: the
   * rollout and attempt whose key the export came with, null on the shared endpoint with the daemon's token.
   */
  private async otlpRoute(
    owner: { readonly rolloutId: string; readonly attempt: number } | null,
    path: string,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    if (path !== '/v1/traces') {
      // Accepted and not stored, so that SDKs exporting all signals to one endpoint don't fail.
      request.resume();
      sendJson(response, 200, {});
      return;
    }
    const body = await readBody(request, this.maxBodyBytes);
    // An exporter that leaves (a timeout, a closed connection) stops its export's work.
    const left = new AbortController();
    response.once('close', () => left.abort());
    let result;
    try {
      result = await this.options.otlp.ingest(
        owner?.rolloutId ?? null,
        body,
        request.headers['content-type'],
        request.headers['content-encoding'],
        (id) => this.admitsSpans(id),
        {
          signal: left.signal,
          take: (bytes) => this.budget.take(bytes, response),
          ...(owner ? { attempt: owner.attempt } : {}),
        },
      );
    } catch (error) {
      if (!(error instanceof ExportCancelledError)) throw error;
      this.options.logger.info('an OTLP export was cancelled: its client disconnected', {
        rolloutId: owner?.rolloutId,
      });
      return;
    }
    response.writeHead(200, { 'content-type': result.contentType, 'content-length': result.body.length });
    response.end(result.body);
  }

  private async dispatch(
    key: string,
    path: string,
    search: string,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    const agent = this.options.store.findAgentKey(key);
    if (!agent)
      throw new NotFoundError(
        'unknown rollout key: this URL belongs to no running rollout of this daemon (an attempt that ended has its URL revoked)',
      );
    // A live key: this connection is an agent's, never closed to make room for anonymous ones.
    markKeyed(request);
    // The agent's own credentials (Authorization, x-api-key, x-goog-api-key, ?key=, …) and its key are this
    // rollout's secrets: an upstream echo, a reward comment or an OTLP attribute holding one is redacted.
    rememberRolloutSecrets(agent.rolloutId, [key, ...requestSecretValues(request.headers, search)]);
    const route = `${request.method} ${path}`;
    const provider = providerRoute(request.method, path, search, request.headers);
    if (provider) return this.forwardToProvider(agent, provider, request, response);
    if (path.startsWith('/v1/') && `${request.method} ${path.slice(3)}` in PROXIED) {
      const api = PROXIED[`${request.method} ${path.slice(3)}`]!;
      const body = request.method === 'POST' ? await readBody(request, this.maxBodyBytes) : Buffer.alloc(0);
      const json = api ? parseJsonBody(request, body) : null;
      const callIndex = api && api !== 'embeddings' ? this.nextCallIndex(agent.rolloutId) : 0;
      const forwarded = agent.tokenIds && json ? withEngineTokenIds(api, json) : undefined;
      const rolloutId = agent.rolloutId;
      try {
        await this.proxy.forward(
          {
            rolloutId,
            attempt: agent.attempt,
            callIndex,
            upstream: this.policyRouter.route(agent.upstream, { rolloutId, callIndex, json }, request.headers),
            api,
            path: `${path.slice(3)}${search}`,
            body: forwarded ?? body,
            json,
            tokenIdsRequested: forwarded !== undefined,
          },
          request,
          response,
        );
      } finally {
        this.policyRouter.done(rolloutId, callIndex);
      }
      return;
    }
    switch (route) {
      case 'POST /v1/traces':
      case 'POST /v1/metrics':
      case 'POST /v1/logs':
        await this.otlpRoute(agent, path, request, response);
        return;
      case 'POST /reward': {
        const body = RewardBody.safeParse(parseJsonBody(request, await readBody(request, 1024 * 1024)));
        if (!body.success) throw new InvalidInputError(describeIssues(body.error, 'body'));
        // For the attempt the key opened, checked in the write itself (store/rewards.ts#postedIn).
        const reward = await this.options.writes.submit(() =>
          this.options.store.addReward(
            { ...body.data, rolloutId: agent.rolloutId, source: 'agent', author: null, reason: null },
            agent.attempt,
          ),
        );
        sendJson(response, 200, reward);
        return;
      }
      case 'POST /finish': {
        const body = FinishBody.safeParse(parseJsonBody(request, await readBody(request, 64 * 1024)));
        if (!body.success) throw new InvalidInputError(describeIssues(body.error, 'body'));
        if (!this.options.workerBatches?.owns(agent.rolloutId))
          throw new NotFoundError(
            'this rollout was not handed out by a worker batch: only `/next` rollouts end with /finish',
          );
        const rollout = await this.options.workerBatches.end(
          agent.rolloutId,
          body.data.status,
          body.data.error ?? (body.data.status === 'failed' ? 'the agent worker reported a failure' : null),
        );
        sendJson(response, 200, { rolloutId: rollout.id, status: rollout.status });
        return;
      }
      case 'GET /task': {
        const task = this.options.store.getRollout(agent.rolloutId).task;
        if (task === null) throw new NotFoundError('this rollout has no task');
        sendJson(response, 200, task);
        return;
      }
      case 'GET /resources':
        sendJson(response, 200, this.options.store.agentResources(agent.rolloutId));
        return;
      default:
        throw new NotFoundError(`no agent endpoint ${route}; see docs/agents.md, "Agent-facing HTTP"`);
    }
  }

  /**
   * An Anthropic or Gemini call: forwarded to the rollout's own upstream for that provider (else the
   * provider's), or — when the rollout records exact token ids (a checkpoint, the trainer's policy,
   * `--token-ids`) — translated to chat completions for the rollout's OpenAI-compatible upstream.
   */
  private async forwardToProvider(
    agent: AgentKeyRecord,
    route: ProviderRoute,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    const body =
      request.method === 'POST' || request.method === 'PUT'
        ? await readBody(request, this.maxBodyBytes)
        : Buffer.alloc(0);
    const json = route.api ? parseJsonBody(request, body) : null;
    const callIndex = route.api ? this.nextCallIndex(agent.rolloutId) : 0;
    const call = {
      rolloutId: agent.rolloutId,
      attempt: agent.attempt,
      callIndex,
      api: route.api,
      path: route.path,
      body,
      json,
      tokenIdsRequested: false,
      model: route.model,
      errorBody: route.errorBody,
    };
    if (agent.tokenIds && route.api) {
      const stream = route.api === 'anthropic.messages' ? json?.stream === true : route.stream;
      const chatBase = this.policyRouter.route(agent.upstream, call, request.headers) ?? this.options.upstream.baseUrl;
      try {
        await this.translating.forward({ ...call, upstream: agent.upstream, chatBase, stream }, request, response);
      } finally {
        this.policyRouter.done(call.rolloutId, callIndex);
      }
      return;
    }
    if (agent.tokenIds && !agent.providerUpstreams[route.provider]) {
      // Only the policy answers this rollout, and it speaks chat completions only: nothing leaves for the provider.
      request.resume();
      throw new NotFoundError(
        `${route.path.split('?')[0]} is not served while a chat-completions server (a checkpoint, the trainer's policy, --token-ids) answers this rollout; only generation calls are translated`,
      );
    }
    const upstream =
      agent.providerUpstreams[route.provider] ??
      this.options.upstream.providers?.[route.provider] ??
      DEFAULT_PROVIDER_UPSTREAMS[route.provider];
    this.policyRouter.noteAgent(call, request.headers);
    try {
      await this.proxy.forward({ ...call, upstream, path: providerPathAt(upstream, route) }, request, response);
    } finally {
      this.policyRouter.done(call.rolloutId, callIndex);
    }
  }

  /** `POST $LIGHTNING_RUNNER_URL/next`: the next rollout of the batch for this worker, or 204 when it is done. */
  private async nextRollout(
    key: string,
    worker: string,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    request.resume();
    if (!this.options.workerBatches) throw new NotFoundError('this daemon serves no worker batches');
    if (this.options.workerBatches.knows(key)) markKeyed(request);
    const assignment = await this.options.workerBatches.next(key, worker, () => !response.destroyed);
    if (assignment === null) {
      response.writeHead(204).end();
      return;
    }
    sendJson(response, 200, assignment);
  }

  /** Why a rollout takes no more spans over OTLP (it has finished), else the attempt it runs now, if one runs. */
  private admitsSpans(rolloutId: string): Admission {
    let rollout;
    try {
      rollout = this.options.store.getRollout(rolloutId);
    } catch {
      return undefined; // Unknown: the write itself reports that it does not exist.
    }
    if (hasEnded(rollout.status))
      return {
        refused: `rollout ${rolloutId} has finished (${rollout.status}); a finished rollout takes no more spans`,
      };
    // A running attempt's: written late if it ends first. Between attempts (queued), the store's current attempt.
    return rollout.status === 'running' ? { attempt: rollout.attemptCount } : undefined;
  }

  private nextCallIndex(rolloutId: string): number {
    const next = (this.callCounters.get(rolloutId) ?? this.options.store.getRollout(rolloutId).llmCalls) + 1;
    this.callCounters.delete(rolloutId);
    this.callCounters.set(rolloutId, next);
    // Bounded: the least recently used counters go; they restart from the stored count.
    if (this.callCounters.size > 10_000) this.callCounters.delete(this.callCounters.keys().next().value!);
    return next;
  }
}

/**
 * The request with the serving engine asked for exact token ids and logprobs (vLLM's
 * `return_token_ids`, OpenAI-style `logprobs`), unless the agent chose its own logprobs setting;
 * undefined for endpoints without them. The agent's own request is what gets recorded.
 */
function withEngineTokenIds(api: Api | null, json: { [key: string]: Json }): Buffer | undefined {
  if (api === 'chat.completions')
    return Buffer.from(JSON.stringify({ logprobs: true, ...json, return_token_ids: true }));
  if (api === 'completions') return Buffer.from(JSON.stringify({ logprobs: 1, ...json, return_token_ids: true }));
  return undefined;
}

function bearerMatches(header: string | undefined, token: string): boolean {
  const given = Buffer.from(/^Bearer (.+)$/.exec(header ?? '')?.[1] ?? '');
  const expected = Buffer.from(token);
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}
