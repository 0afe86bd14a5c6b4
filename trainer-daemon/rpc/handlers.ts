/**
 * The implementation of every RPC method, in one table. The RPC server serves it over WebSocket;
 * the CLI calls the same table directly on the store when no daemon runs, so both paths behave
 * the same.
 */
import { Methods, describeIssues, type MethodName, type ParsedParamsOf, type ResultOf, type DaemonInfo } from '../protocol';
import { InvalidInputError } from '../errors';
import type { Store } from '../store/store';
import type { SpanWriter } from '../store/spanWriter';

export type Handlers = {
  [M in MethodName]: (params: ParsedParamsOf<M>) => ResultOf<M> | Promise<ResultOf<M>>;
};

export interface HandlerContext {
  readonly store: Store;
  /** Batches span writes across concurrent calls; without one, each call writes its own transaction. */
  readonly spanWriter?: SpanWriter;
  readonly info: () => DaemonInfo;
}

export function createHandlers({ store, spanWriter, info }: HandlerContext): Handlers {
  return {
    daemonInfo: () => info(),
    listRollouts: (params) => store.listRollouts(params),
    getRollout: ({ id }) => store.getRolloutDetail(store.resolveRolloutId(id)),
    createRollout: (params) => store.createRollout(params),
    transitionRollout: (params) => store.transitionRollout({ ...params, id: store.resolveRolloutId(params.id) }),
    addSpans: async ({ rolloutId, spans }) => ({
      results: spanWriter ? await spanWriter.write(rolloutId, spans) : store.addSpans({ rolloutId, spans }).results,
    }),
    addReward: (params) => store.addReward({ ...params, rolloutId: store.resolveRolloutId(params.rolloutId) }),
    listRewards: ({ rolloutId }) => ({ items: store.listRewards(store.resolveRolloutId(rolloutId)) }),
    getStats: () => store.stats(),
  };
}

/** Validates raw params against the method's schema; the error names the bad field. */
export function parseParams<M extends MethodName>(name: M, raw: unknown): ParsedParamsOf<M> {
  const parsed = Methods[name].params.safeParse(raw ?? {});
  if (!parsed.success) throw new InvalidInputError(describeIssues(parsed.error, 'params'));
  return parsed.data as ParsedParamsOf<M>;
}

/** Calls a handler with validated params: what the server does per request, and the CLI's local path. */
export async function invoke<M extends MethodName>(handlers: Handlers, name: M, raw: unknown): Promise<ResultOf<M>> {
  const params = parseParams(name, raw);
  const handler = handlers[name] as (params: ParsedParamsOf<M>) => ResultOf<M> | Promise<ResultOf<M>>;
  return handler(params);
}
