/**
 * Several policies in one training run (protocol/policies.ts): the recording proxy asks this router, for each call of
 * a rollout, which adapter of the trainer's policy server answers it. A run with several policies registers its
 * server's upstream URLs (`…/v1` for training rollouts, `…/greedy/v1` for validation) with its policies; a call whose
 * rollout goes to one of them is sent to `…/adapter/<policy>/v1` (or `…/base/v1` when no policy matches), and its span
 * records `lightning.policy` and `lightning.policy_route`. Calls to any other upstream pass untouched. The router lives
 * in the daemon's process: the training loop registers, the agent routes ask.
 *
 * Every proxied call's span also records the agent name its `baggage` carries, as `gen_ai.agent.name` (unless the
 * span has one): the name a policy's REGEX is matched against when the call is made is the name LightningRL reads
 * later (`--agent`, a policy's transitions) and the one Start Training offers from a dataset's rollouts.
 */
import type { IncomingHttpHeaders } from 'node:http';
import {
  BASE_POLICY,
  POLICY_ATTRIBUTE,
  POLICY_ROUTE_ATTRIBUTE,
  policyFor,
  type Json,
  type PolicySpec,
  type SpanInput,
} from '../protocol';
import type { Disposable } from '../protocol/event';

/** The span attribute the baggage's agent name is recorded as (OpenTelemetry GenAI's name for it). */
export const AGENT_NAME_ATTRIBUTE = 'gen_ai.agent.name';

/** The baggage keys an agent's name is read from, in this order (OpenTelemetry GenAI's first). */
const AGENT_BAGGAGE_KEYS = ['gen_ai.agent.name', 'agent.name'];
/**
 * Routed calls whose span is not recorded yet: at most this many are remembered (a call that never records is
 * forgotten).
 */
const MAX_PENDING = 10_000;

interface Compiled {
  readonly name: string;
  readonly match: RegExp;
}

/** The agent's name from a W3C `baggage` header (`k=v;props,k2=v2`, values percent-encoded); null without one. */
export function baggageAgentName(header: string | string[] | undefined): string | null {
  const text = Array.isArray(header) ? header.join(',') : (header ?? '');
  const entries = new Map<string, string>();
  for (const member of text.split(',')) {
    const [pair] = member.split(';');
    const at = pair?.indexOf('=') ?? -1;
    if (!pair || at <= 0) continue;
    let value = pair.slice(at + 1).trim();
    try {
      value = decodeURIComponent(value);
    } catch {
      // A malformed escape: the raw text is the name the agent meant as well as any.
    }
    entries.set(pair.slice(0, at).trim(), value);
  }
  for (const key of AGENT_BAGGAGE_KEYS) {
    const value = entries.get(key);
    if (value) return value;
  }
  return null;
}

export class PolicyRouter {
  /** Registered upstream bases (`…/v1`, `…/greedy/v1`) → the run's policies. */
  private readonly servers = new Map<string, readonly Compiled[]>();
  /** `rolloutId \0 callIndex` → the attributes its span gets when recorded. */
  private readonly pending = new Map<string, Record<string, string>>();

  /** Routes the calls of rollouts whose upstream is one of `upstreams` among `policies`, until disposed. */
  register(upstreams: readonly string[], policies: readonly PolicySpec[]): Disposable {
    const compiled = policies.map((p) => ({ name: p.name, match: new RegExp(p.match) }));
    const keys = upstreams.map((u) => u.replace(/\/+$/, ''));
    for (const key of keys) this.servers.set(key, compiled);
    return { dispose: () => keys.forEach((key) => this.servers.delete(key)) };
  }

  /**
   * Where a call goes: for a rollout of a run with several policies, its adapter's route (the attributes are kept for
   * its span, {@link stamp}); else the upstream as it was.
   */
  route(
    upstream: string | null,
    call: { readonly rolloutId: string; readonly callIndex: number; readonly json: { [key: string]: Json } | null },
    headers: IncomingHttpHeaders,
  ): string | null {
    const agent = this.noteAgent(call, headers);
    const base = upstream?.replace(/\/+$/, '');
    const policies = base === undefined ? undefined : this.servers.get(base);
    if (base === undefined || policies === undefined || !base.endsWith('/v1')) return upstream;
    const model = typeof call.json?.model === 'string' ? call.json.model : null;
    const { policy, route } = policyFor(policies, { agent, model });
    this.remember(call, { [POLICY_ATTRIBUTE]: policy, [POLICY_ROUTE_ATTRIBUTE]: route });
    const prefix = policy === BASE_POLICY ? '/base' : `/adapter/${policy}`;
    return `${base.slice(0, -'/v1'.length)}${prefix}/v1`;
  }

  /** The agent name in a call's baggage, kept for its span ({@link stamp}); null without one. */
  noteAgent(
    call: { readonly rolloutId: string; readonly callIndex: number },
    headers: IncomingHttpHeaders,
  ): string | null {
    const agent = baggageAgentName(headers.baggage);
    if (agent !== null) this.remember(call, { [AGENT_NAME_ATTRIBUTE]: agent });
    return agent;
  }

  private remember(
    call: { readonly rolloutId: string; readonly callIndex: number },
    attributes: Record<string, string>,
  ): void {
    const key = `${call.rolloutId}\u0000${call.callIndex}`;
    const known = this.pending.get(key);
    if (!known && this.pending.size >= MAX_PENDING) this.pending.delete(this.pending.keys().next().value!);
    this.pending.set(key, { ...known, ...attributes });
  }

  /** Adds what {@link route} kept of a call (its routing, its agent's name) to its span, as the span is recorded. */
  stamp(span: SpanInput, rolloutId: string): void {
    const index = span.attributes['lightning.call_index'];
    if (typeof index !== 'number') return;
    const key = `${rolloutId}\u0000${index}`;
    const attributes = this.pending.get(key);
    if (!attributes) return;
    this.pending.delete(key);
    const { [AGENT_NAME_ATTRIBUTE]: agent, ...routing } = attributes;
    // An agent name the span already has (a translated call's own) stays.
    if (agent !== undefined && !(AGENT_NAME_ATTRIBUTE in span.attributes))
      span.attributes[AGENT_NAME_ATTRIBUTE] = agent;
    Object.assign(span.attributes, routing);
  }

  /** Forgets a call's routing once it is done (recorded or not). */
  done(rolloutId: string, callIndex: number): void {
    this.pending.delete(`${rolloutId}\u0000${callIndex}`);
  }
}
