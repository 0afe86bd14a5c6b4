/**
 * Spans shaped as the store returns them, for the editor tabs' pure view logic (unit tests and
 * bench): an agent rollout of N steps — one agent span, under it per step an LLM call (a chat
 * completion request with the conversation so far, and its response) and a tool span — and
 * single spans with a given parent, timing and status.
 */
import {
  outcomeAttributes,
  RETRY_OF_ATTRIBUTE,
  type CallOutcome,
  type Json,
  type Span,
} from '../../trainer-daemon/protocol';

let counter = 0;
export const spanId = (n: number): string => n.toString(16).padStart(16, '0');

export function span(extra: Partial<Span> & { sequence: number }): Span {
  return {
    traceId: '0'.repeat(31) + '1',
    spanId: spanId(extra.sequence),
    parentSpanId: null,
    name: `span ${extra.sequence}`,
    kind: 'internal',
    category: 'other',
    startMs: 1_000,
    endMs: 1_010,
    statusCode: 'ok',
    statusMessage: null,
    attributes: {},
    events: [],
    promptTokens: null,
    completionTokens: null,
    rolloutId: 'ro-1',
    attempt: 1,
    ...extra,
  };
}

export interface AgentRolloutOptions {
  readonly rolloutId?: string;
  /** What step i's user turn and answer say (a variant changes some of them). */
  readonly question?: (step: number) => string;
  readonly answer?: (step: number) => string;
  /** Every how many steps a tool fails. */
  readonly errorEvery?: number;
  /** Each call resends the conversation so far (default), or only the system prompt and its question. */
  readonly history?: boolean;
  /** Span ids start after this number (distinct rollouts in one store get distinct ids). */
  readonly idBase?: number;
}

/** An agent rollout with `steps` LLM calls and tool calls under one agent span: 2 × steps + 1 spans. */
export function agentRollout(steps: number, options: AgentRolloutOptions = {}): Span[] {
  counter += 1;
  const rolloutId = options.rolloutId ?? `ro-${counter}`;
  const question = options.question ?? ((i: number) => `What is ${i} plus ${i}?`);
  const answer = options.answer ?? ((i: number) => `The answer is ${2 * i}.`);
  const base = 1_700_000_000_000;
  const idBase = options.idBase ?? 0;
  const id = (sequence: number): string => spanId(idBase + sequence);
  const spans: Span[] = [
    span({
      sequence: 1,
      spanId: id(1),
      rolloutId,
      name: 'agent run',
      category: 'agent',
      startMs: base,
      endMs: base + steps * 30 + 5,
    }),
  ];
  const messages: Json[] = [{ role: 'system', content: 'You add numbers with the add tool.' }];
  for (let i = 0; i < steps; i += 1) {
    const start = base + i * 30;
    messages.push({ role: 'user', content: question(i) });
    const request: Json = {
      model: 'test-model',
      messages: options.history === false ? [messages[0]!, messages.at(-1)!] : [...messages],
      tools: [{ type: 'function', function: { name: 'add', description: 'adds two numbers' } }],
    };
    const response: Json = {
      id: `c${i}`,
      model: 'test-model',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: answer(i),
            tool_calls: [
              { id: `call_${i}`, type: 'function', function: { name: 'add', arguments: `{"a":${i},"b":${i}}` } },
            ],
          },
        },
      ],
      usage: { prompt_tokens: 12 + i, completion_tokens: 7 },
    };
    spans.push(
      span({
        sequence: 2 + 2 * i,
        spanId: id(2 + 2 * i),
        rolloutId,
        parentSpanId: id(1),
        name: 'chat test-model',
        category: 'llm',
        kind: 'client',
        startMs: start,
        endMs: start + 20,
        promptTokens: 12 + i,
        completionTokens: 7,
        attributes: { 'lightning.request': request, 'lightning.response': response },
      }),
    );
    const failed = options.errorEvery !== undefined && i % options.errorEvery === options.errorEvery - 1;
    spans.push(
      span({
        sequence: 3 + 2 * i,
        spanId: id(3 + 2 * i),
        rolloutId,
        parentSpanId: id(1),
        name: 'tool add',
        category: 'tool',
        startMs: start + 20,
        endMs: start + 28,
        statusCode: failed ? 'error' : 'ok',
        statusMessage: failed ? 'add failed' : null,
      }),
    );
    messages.push({ role: 'assistant', content: answer(i) });
  }
  return spans;
}

/**
 * An agent's LLM calls as the proxy records them when the upstream misbehaves (outcomeChecks.ts's runs): a 429 and
 * its retry, a 500 and its retry, a stream the client cancelled, one cut at the content limit, a whole answer.
 */
export function faultyCalls(): Span[] {
  const call = (sequence: number, outcome: CallOutcome, extra: Partial<Span> = {}, retryOf?: number): Span =>
    span({
      sequence,
      category: 'llm',
      kind: 'client',
      name: 'chat gpt-4o-mini',
      startMs: 1_000 + sequence * 100,
      endMs: 1_050 + sequence * 100,
      attributes: {
        'lightning.request': { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Weather in Paris?' }] },
        ...outcomeAttributes(outcome),
        ...(retryOf === undefined ? {} : { [RETRY_OF_ATTRIBUTE]: spanId(retryOf) }),
      },
      ...extra,
    });
  const failed = (status: number): Partial<Span> => ({
    statusCode: 'error',
    statusMessage: `upstream HTTP ${status}: the model is overloaded`,
  });
  return [
    call(1, { kind: 'upstream_error', status: 429 }, failed(429)),
    call(2, { kind: 'ok' }, {}, 1),
    call(3, { kind: 'upstream_error', status: 500 }, failed(500)),
    call(4, { kind: 'ok' }, {}, 3),
    call(5, { kind: 'cancelled' }, { statusCode: 'error', statusMessage: 'cancelled: the client went away' }),
    call(6, { kind: 'truncated', limit: 'stream_content' }),
    call(7, { kind: 'ok' }),
  ];
}
