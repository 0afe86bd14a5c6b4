import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { SpanStatusCode } from '@opentelemetry/api';
import {
  asChatCall,
  callBadge,
  countSkipped,
  describeSkipped,
  markTruncated,
  noSkippedCalls,
  spanOutcome,
  stoppedAtTokenCap,
  type Span,
} from '../../trainer-daemon/protocol';
import { RECORD_LIMITS, scrubSpan } from '../../trainer-daemon/protocol/recordScrub';
import { decodeTraceRequest } from '../../trainer-daemon/otlp/decode';
import { normalizeTraceRequest } from '../../trainer-daemon/otlp/normalize';
import { streamContentChars } from '../../trainer-daemon/capture/streamContent';
import { toScoringTrajectory } from '../../trainer-daemon/rewards/trajectory';
import type { Trajectory } from '../../trainer-daemon/protocol/lightningrl';
import { encode, recordSpans } from '../helpers/otlp';
import { llmSpan } from '../helpers/spans';
import { SftConfig } from '../../trainer-daemon/protocol/sft';
import { Store } from '../../trainer-daemon/store/store';
import { sftRows } from '../../trainer-daemon/training/sftRows';
import { buildTransitions, TOKEN_CAP_REASON } from '../../trainer-daemon/lightningrl/transitions';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';

describe('LLM call outcomes', () => {
  test('a span reads its recorded outcome; one without reads from its status (OTLP spans, older records)', () => {
    assert.deepEqual(
      spanOutcome(llmSpan({ attributes: { 'lightning.outcome': 'upstream_error', 'http.response.status_code': 429 } })),
      { kind: 'upstream_error', status: 429 },
    );
    assert.deepEqual(
      spanOutcome(
        llmSpan({ attributes: { 'lightning.outcome': 'truncated', 'lightning.truncated_by': 'string_chars' } }),
      ),
      { kind: 'truncated', limit: 'string_chars' },
    );
    assert.deepEqual(
      spanOutcome(
        llmSpan({ statusCode: 'error', statusMessage: 'cancelled: the client disconnected before the response ended' }),
      ),
      { kind: 'cancelled' },
    );
    assert.deepEqual(
      spanOutcome(
        llmSpan({
          statusCode: 'error',
          statusMessage: 'upstream HTTP 500',
          attributes: { 'http.response.status_code': 500 },
        }),
      ),
      { kind: 'upstream_error', status: 500 },
    );
    assert.deepEqual(
      spanOutcome(llmSpan({ attributes: { 'lightning.response': { choices: [], lightning_truncated: 'cut' } } })),
      { kind: 'truncated', limit: 'stream_content' },
    );
    assert.deepEqual(spanOutcome(llmSpan()), { kind: 'ok' });
  });

  test('an OTLP LLM span whose exporter reported an error is recorded as an upstream error; an ok one is left unmarked', () => {
    const spans = recordSpans((tracer) => {
      const failed = tracer.startSpan('chat gpt', {
        attributes: {
          'gen_ai.operation.name': 'chat',
          'gen_ai.request.model': 'gpt',
          'http.response.status_code': 503,
        },
      });
      failed.setStatus({ code: SpanStatusCode.ERROR, message: 'Service Unavailable' });
      failed.end();
      tracer
        .startSpan('chat gpt', { attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'gpt' } })
        .end();
    });
    const normalized = normalizeTraceRequest(
      decodeTraceRequest(encode(spans, 'json'), 'application/json', undefined, 1024 * 1024),
    ).spans.map((s) => s.span);
    assert.equal(normalized[0]!.attributes['lightning.outcome'], 'upstream_error');
    assert.deepEqual(spanOutcome(normalized[0]!), { kind: 'upstream_error', status: 503 });
    assert.equal(normalized[1]!.attributes['lightning.outcome'], undefined);
  });

  test('a record cut at a size limit where the store takes it is truncated, naming the limit; an error stays an error', () => {
    const image = 'A'.repeat(RECORD_LIMITS.maxStringChars + 10);
    const request = {
      model: 'm',
      messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${image}` } }] },
      ],
    };
    const cut = scrubSpan(llmSpan({ attributes: { 'lightning.outcome': 'ok', 'lightning.request': request } }));
    assert.deepEqual(spanOutcome(cut), { kind: 'truncated', limit: 'string_chars' });
    const failed = scrubSpan(
      llmSpan({
        statusCode: 'error',
        attributes: { 'lightning.outcome': 'upstream_error', 'lightning.request': request },
      }),
    );
    assert.equal(spanOutcome(failed).kind, 'upstream_error');
    const deep: Record<string, unknown> = {};
    let level = deep;
    for (let i = 0; i < RECORD_LIMITS.maxDepth + 2; i += 1) level = level.next = {};
    assert.deepEqual(spanOutcome(scrubSpan(llmSpan({ attributes: { 'lightning.request': deep as never } }))), {
      kind: 'truncated',
      limit: 'depth',
    });
    const tool = scrubSpan(llmSpan({ category: 'tool', attributes: { input: image } }));
    assert.equal(tool.attributes['lightning.outcome'], undefined, 'only LLM calls carry an outcome');
    assert.equal(
      scrubSpan(llmSpan({ attributes: { 'lightning.request': request.messages[0]!.role } })).attributes[
        'lightning.outcome'
      ],
      undefined,
    );
  });

  test('a stream counts its content toward the limit, not its framing', () => {
    const chunk = {
      id: 'chatcmpl-0123456789abcdef',
      object: 'chat.completion.chunk',
      created: 1733097600,
      model: 'gpt-4o-mini-2024-07-18',
      system_fingerprint: 'fp_0123',
      choices: [{ index: 0, delta: { content: 'ab' }, finish_reason: null, logprobs: null }],
    };
    assert.equal(streamContentChars('chat.completions', chunk), 2);
    assert.ok(
      JSON.stringify(chunk).length > 50 * streamContentChars('chat.completions', chunk),
      'the framing is most of the event',
    );
    assert.equal(
      streamContentChars('anthropic.messages', {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'text_delta', text: 'hello' },
      }),
      5,
    );
    assert.equal(
      streamContentChars('gemini.generate_content', {
        candidates: [{ content: { role: 'model', parts: [{ text: 'hey' }] }, index: 0 }],
        modelVersion: 'gemini-2.5',
        responseId: 'r1',
      }),
      3,
    );
    // A Responses stream's deltas are not kept: its final response is what the record holds.
    assert.equal(
      streamContentChars('responses', {
        type: 'response.output_text.delta',
        item_id: 'msg_1',
        output_index: 0,
        content_index: 0,
        delta: 'word ',
      }),
      0,
    );
    assert.ok(
      streamContentChars('responses', {
        type: 'response.completed',
        response: { id: 'r', output: [{ type: 'message', content: [{ type: 'output_text', text: 'Sunny.' }] }] },
      }) >= 'Sunny.'.length,
    );
  });

  test('an error body is never read as an assistant reply (Anthropic, Gemini, OpenAI)', () => {
    for (const [api, response] of [
      ['anthropic.messages', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }],
      [
        'gemini.generate_content',
        { error: { code: 429, message: 'Resource exhausted', status: 'RESOURCE_EXHAUSTED' } },
      ],
      ['chat.completions', { error: { message: 'rate limited', type: 'rate_limit_exceeded' } }],
    ] as const) {
      assert.equal(
        asChatCall({
          'lightning.api': api,
          'lightning.request': { model: 'm', messages: [] },
          'lightning.response': response,
        }).response,
        null,
        api,
      );
    }
    assert.ok(
      asChatCall({
        'lightning.api': 'anthropic.messages',
        'lightning.response': { type: 'message', content: [{ type: 'text', text: 'hi' }] },
      }).response,
    );
  });

  test('badges and the skipped line', () => {
    const failed = {
      ...llmSpan({ attributes: { 'lightning.outcome': 'upstream_error', 'http.response.status_code': 429 } }),
      sequence: 3,
    };
    const retry = {
      ...llmSpan({ attributes: { 'lightning.outcome': 'ok', 'lightning.retry_of': failed.spanId } }),
      sequence: 4,
    };
    const sequenceOf = (id: string): number | undefined => (id === failed.spanId ? 3 : undefined);
    assert.equal(callBadge(failed, sequenceOf), 'HTTP 429');
    assert.equal(callBadge(retry, sequenceOf), 'retry of #3');
    assert.equal(callBadge(llmSpan(), sequenceOf), null);
    // A call answered after its rollout ended: whole, but no part of the episode (agentRoutes.ts marks it so).
    const late = llmSpan({ attributes: markTruncated({ 'lightning.outcome': 'ok' }, 'rollout_ended') });
    assert.equal(callBadge(late, sequenceOf), 'truncated (answered after the rollout ended)');
    const counted = noSkippedCalls();
    countSkipped(counted, spanOutcome(late));
    assert.equal(describeSkipped(counted), 'skipped: 1 truncated');
    assert.equal(
      describeSkipped({ upstreamError: 2, cancelled: 1, truncated: 1 }),
      'skipped: 2 upstream errors, 1 cancelled, 1 truncated',
    );
    assert.equal(describeSkipped({ upstreamError: 1, cancelled: 0, truncated: 0 }), 'skipped: 1 upstream error');
    assert.equal(describeSkipped(noSkippedCalls()), null);
  });

  test('reward sources and APO read whole answers only: a failed attempt is neither a step nor the final answer', () => {
    const answer = (content: string): Record<string, never> =>
      ({ choices: [{ index: 0, message: { role: 'assistant', content } }] }) as never;
    const spans = [
      llmSpan({
        attributes: {
          'lightning.api': 'chat.completions',
          'lightning.request': { messages: [] },
          'lightning.response': answer('Paris.'),
        },
      }),
      llmSpan({
        statusCode: 'error',
        attributes: {
          'lightning.api': 'chat.completions',
          'lightning.outcome': 'cancelled',
          'lightning.request': { messages: [] },
          'lightning.response': answer('Lon'),
        },
      }),
    ].map((span, i) => ({ ...span, rolloutId: 'r', attempt: 1, sequence: i + 1 })) as Span[];
    const rollout = {
      id: 'r',
      status: 'succeeded',
      error: null,
      promptTokens: 0,
      completionTokens: 0,
    } as Trajectory['rollout'];
    const skipped = noSkippedCalls();
    const scoring = toScoringTrajectory({ rollout, spans, rewards: [] }, skipped);
    assert.equal(scoring.finalAnswer, 'Paris.');
    assert.equal(scoring.steps, 1);
    assert.deepEqual(skipped, { upstreamError: 0, cancelled: 1, truncated: 0 });
  });

  test("a reply that stopped at its token cap: read from the first choice's finish reason, OTLP spans alike", () => {
    const reasons = (value: unknown, response?: unknown): boolean =>
      stoppedAtTokenCap({
        'gen_ai.response.finish_reasons': value as string[],
        ...(response === undefined ? {} : { 'lightning.response': response as Record<string, string> }),
      });
    for (const capped of [['length'], ['max_tokens'], ['MAX_TOKENS'], 'length', ['length', 'stop']])
      assert.equal(reasons(capped), true, JSON.stringify(capped));
    // Only the first choice becomes a row: a later choice cut does not cut it.
    for (const whole of [['stop'], ['tool_calls'], ['end_turn'], ['STOP'], ['stop', 'length'], [], 42])
      assert.equal(reasons(whole), false, JSON.stringify(whole));
    assert.equal(reasons(['incomplete'], { incomplete_details: { reason: 'max_output_tokens' } }), true);
    assert.equal(reasons(['incomplete']), true, 'an OTLP span without the response: the usual reason');
    assert.equal(reasons(['incomplete'], { incomplete_details: { reason: 'content_filter' } }), false);
    assert.equal(stoppedAtTokenCap({}), false);

    // An OTLP span of an instrumented agent says so the same way; its outcome stays ok.
    const spans = recordSpans((tracer) => {
      tracer
        .startSpan('chat gpt', {
          attributes: {
            'gen_ai.operation.name': 'chat',
            'gen_ai.request.model': 'gpt',
            'gen_ai.response.finish_reasons': ['length'],
          },
        })
        .end();
    });
    const [span] = normalizeTraceRequest(
      decodeTraceRequest(encode(spans, 'json'), 'application/json', undefined, 1024 * 1024),
    ).spans.map((s) => s.span);
    assert.deepEqual(spanOutcome(span!), { kind: 'ok' });
    assert.equal(
      callBadge({ ...span!, category: 'llm' }, () => undefined),
      'stopped at its token cap',
    );
  });

  test('a reply cut at its token cap: an RL row, flagged; no SFT row, counted in notChat', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    for (const [content, finish] of [
      ['42', 'stop'],
      ['The answer is forty-t', 'length'],
    ] as const) {
      const { id } = store.createRollout(parsed('createRollout', {}));
      const response = { choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finish }] };
      store.addSpans({
        rolloutId: id,
        spans: [
          llmSpan({
            attributes: {
              'lightning.outcome': 'ok',
              'lightning.api': 'chat.completions',
              'lightning.request': { model: 'm', messages: [{ role: 'user', content: '6 × 7?' }] },
              'lightning.response': response,
              'gen_ai.response.finish_reasons': [finish],
            },
          }),
        ],
      });
      store.addReward(parsed('addReward', { rolloutId: id, value: 1, source: 'agent' }));
    }
    const { transitions, report } = buildTransitions(store.trajectories({}), {
      reward: { name: 'reward', missing: 'exclude', fillValue: 0 },
      credit: { kind: 'identical' },
      advantage: { kind: 'none', normalizeStd: false, std: 'sample', epsilon: 1e-4 },
    });
    assert.deepEqual(
      transitions.map((tr) => [tr.response.message?.content, tr.stoppedAtTokenCap]),
      [
        ['42', undefined],
        ['The answer is forty-t', true],
      ],
    );
    assert.deepEqual(report.skipped, noSkippedCalls(), 'a cut reply is not a failed call');

    const rows = sftRows(store.trajectories({}), SftConfig.parse({ algorithm: 'sft', model: { kind: 'tiny' } }));
    assert.deepEqual(
      [...rows.train, ...rows.val].map((row) => row.completion.content),
      ['42'],
    );
    assert.deepEqual(rows.notChat, { [TOKEN_CAP_REASON]: 1 });

    // A failed call whose record says `length` (a stream cut mid-answer) is no cut whole answer: its outcome says it.
    const failed = store.createRollout(parsed('createRollout', {})).id;
    store.addSpans({
      rolloutId: failed,
      spans: [
        llmSpan({
          statusCode: 'error',
          attributes: {
            'lightning.outcome': 'upstream_error',
            'lightning.api': 'chat.completions',
            'lightning.request': { model: 'm', messages: [{ role: 'user', content: '6 × 7?' }] },
            'gen_ai.response.finish_reasons': ['length'],
          },
        }),
      ],
    });
    store.addReward(parsed('addReward', { rolloutId: failed, value: 0, source: 'agent' }));
    const kept = buildTransitions(store.trajectoriesOf([failed]), {
      reward: { name: 'reward', missing: 'exclude', fillValue: 0 },
      credit: { kind: 'identical' },
      advantage: { kind: 'none', normalizeStd: false, std: 'sample', epsilon: 1e-4 },
      includeFailed: true,
    }).transitions;
    assert.deepEqual(
      kept.map((tr) => [tr.outcome?.kind, tr.stoppedAtTokenCap]),
      [['upstream_error', undefined]],
    );
  });
});
