/** The side panel's message protocol and its pure formatting: LLM call views, span trees, filters. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ExtensionToWebview, RolloutFilter, WebviewToExtension } from '../../trainer-daemon/protocol/ui/panelMessages';
import { extensionMessage, rolloutFilter } from '../../webview/pageInput';
import {
  llmCallView,
  matchesFilter,
  servedByText,
  spanDepths,
  stepHeading,
} from '../../trainer-daemon/protocol/ui/rolloutText';
import { faultyCalls } from '../helpers/editorFixtures';
import { formatDuration } from '../../trainer-daemon/protocol/format';
import type { Json, Rollout, Span } from '../../trainer-daemon/protocol';

function span(attributes: Record<string, Json>, extra: Partial<Span> = {}): Span {
  return {
    traceId: '0'.repeat(31) + '1',
    spanId: 'a'.repeat(16),
    parentSpanId: null,
    name: 'chat m',
    kind: 'client',
    category: 'llm',
    startMs: 1_000,
    endMs: 1_250,
    statusCode: 'ok',
    statusMessage: null,
    attributes,
    events: [],
    promptTokens: 12,
    completionTokens: 7,
    rolloutId: 'ro-1',
    attempt: 1,
    sequence: 1,
    ...extra,
  };
}

describe('webview protocol', () => {
  it('accepts the messages each end sends', () => {
    assert.ok(WebviewToExtension.safeParse({ type: 'ready' }).success);
    assert.ok(
      WebviewToExtension.safeParse({
        type: 'listRollouts',
        requestId: 3,
        filter: { status: 'failed', search: 'paris' },
        cursor: null,
      }).success,
    );
    assert.ok(
      WebviewToExtension.safeParse({
        type: 'annotate',
        rolloutId: 'ro-1',
        spanId: 'ab'.repeat(8),
        value: 0.5,
        comment: null,
      }).success,
    );
    assert.ok(ExtensionToWebview.safeParse({ type: 'daemonState', state: 'failed', message: 'no runtime' }).success);
    assert.ok(ExtensionToWebview.safeParse({ type: 'spansAvailable', rolloutId: 'ro-1', toSequence: 9 }).success);
  });

  it('rejects malformed messages, naming the field', () => {
    const cases: Array<[unknown, string]> = [
      [{ type: 'annotate', rolloutId: 'ro-1', spanId: 'not-hex', value: 1, comment: null }, 'spanId'],
      [{ type: 'annotate', rolloutId: 'ro-1', spanId: null, value: Infinity, comment: null }, 'value'],
      [{ type: 'listRollouts', requestId: 1, filter: { status: 'exploded' }, cursor: null }, 'filter'],
      [{ type: 'delete-everything' }, 'type'],
    ];
    for (const [message, field] of cases) {
      const result = WebviewToExtension.safeParse(message);
      assert.equal(result.success, false);
      assert.equal(result.error?.issues[0]?.path[0], field);
    }
  });
});

describe('what a page reads without zod', () => {
  it('takes an object with a type as a message, nothing else', () => {
    assert.deepEqual(extensionMessage({ type: 'spansAvailable', rolloutId: 'ro-1', toSequence: 9 }), {
      type: 'spansAvailable',
      rolloutId: 'ro-1',
      toSequence: 9,
    });
    for (const data of [null, undefined, 'spans', 3, [], { type: 7 }, { kind: 'spans' }])
      assert.equal(extensionMessage(data), undefined);
  });

  it('keeps a filter to the schema the extension checks it with (RolloutFilter)', () => {
    const cases: unknown[] = [
      {},
      { status: 'failed', mode: 'train', search: 'paris' },
      { datasetId: 'ds-1', batchId: 'b-1' },
      { status: 'exploded' },
      { mode: 'prod' },
      { search: 'x'.repeat(200) },
      { search: 'x'.repeat(201) },
      { batchId: 42 },
    ];
    for (const fields of cases) {
      const schema = RolloutFilter.safeParse(fields);
      assert.deepEqual(
        rolloutFilter(fields as Record<string, unknown>),
        schema.success ? schema.data : undefined,
        JSON.stringify(fields),
      );
    }
  });
});

describe('trajectory formatting', () => {
  it('says which policy served a rollout: a checkpoint in use, or a training iteration', () => {
    const served = ExtensionToWebview.parse({
      type: 'servedBy',
      rolloutId: 'ro-1',
      policy: { runId: 'train-1', step: 3, checkpoint: '/s/ckpt/3', checkpointId: 'ckpt-9' },
    });
    assert.ok(served.type === 'servedBy' && served.policy);
    assert.equal(servedByText(served.policy), 'served by checkpoint ckpt-9 (run train-1, step 3)');
    assert.equal(
      servedByText({ runId: 'train-1', step: 2, checkpoint: '/s/ckpt/2', checkpointId: null }),
      "served by training run train-1's policy at step 2",
    );
    assert.equal(
      servedByText({ runId: 'train-1', step: 0, checkpoint: null, checkpointId: null }),
      "served by training run train-1's policy at step 0 (the base model)",
    );
    assert.equal(
      ExtensionToWebview.safeParse({ type: 'servedBy', rolloutId: 'ro-1', policy: { runId: 'train-1' } }).success,
      false,
    );
  });

  it('reads a chat completion: messages, tools, tool calls, the response, tokens and latency', () => {
    const view = llmCallView(
      span({
        'gen_ai.request.model': 'gpt-x',
        'lightning.request': {
          model: 'gpt-x',
          messages: [
            { role: 'user', content: 'Weather in Paris?' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
              ],
            },
            { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
          ],
          tools: [{ type: 'function', function: { name: 'get_weather' } }],
        },
        'lightning.response': { choices: [{ message: { role: 'assistant', content: 'It is sunny.' } }] },
      }),
    );
    assert.equal(view.model, 'gpt-x');
    assert.deepEqual(view.tools, ['get_weather']);
    assert.deepEqual(
      view.messages.map((m) => m.role),
      ['user', 'assistant', 'tool'],
    );
    assert.deepEqual(view.messages[1]!.toolCalls, [{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    assert.equal(view.response?.content, 'It is sunny.');
    assert.equal(view.latencyMs, 250);
    assert.equal(view.error, null);
  });

  it('reads a Responses API call: instructions, input items, function calls in the output', () => {
    const view = llmCallView(
      span(
        {
          'lightning.request': {
            model: 'm',
            instructions: 'Be brief',
            input: [
              { role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
              { type: 'function_call_output', call_id: 'c', output: '42' },
            ],
            tools: [{ type: 'function', name: 'calc' }],
          },
          'lightning.response': {
            output: [
              { type: 'function_call', name: 'calc', arguments: '{"x":1}' },
              { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Done' }] },
            ],
          },
        },
        { statusCode: 'error', statusMessage: 'upstream 500' },
      ),
    );
    assert.deepEqual(
      view.messages.map((m) => [m.role, m.content]),
      [
        ['system', 'Be brief'],
        ['user', 'Hi'],
        ['tool', '42'],
      ],
    );
    assert.deepEqual(view.tools, ['calc']);
    assert.equal(view.response?.content, 'Done');
    assert.deepEqual(view.response?.toolCalls, [{ name: 'calc', arguments: '{"x":1}' }]);
    assert.equal(view.error, 'upstream 500');
  });

  it('nests spans under their parents; a parent outside the rollout makes a root', () => {
    const root = span({}, { spanId: '1'.repeat(16), parentSpanId: 'f'.repeat(16) });
    const child = span({}, { spanId: '2'.repeat(16), parentSpanId: '1'.repeat(16) });
    const grandchild = span({}, { spanId: '3'.repeat(16), parentSpanId: '2'.repeat(16) });
    assert.deepEqual([...spanDepths([grandchild, root, child]).entries()].sort(), [
      ['1'.repeat(16), 0],
      ['2'.repeat(16), 1],
      ['3'.repeat(16), 2],
    ]);
  });

  it('formats durations and filters rollouts by status, mode and text', () => {
    assert.deepEqual(
      [12, 1_234, 45_600, 125_000, null].map((ms) => formatDuration(ms)),
      ['12 ms', '1.23 s', '45.6 s', '2 min 5 s', '—'],
    );
    const rollout = {
      status: 'failed',
      mode: 'debug',
      label: 'Weather agent',
      task: { id: 't-7', input: { city: 'Oslo' } },
    } as unknown as Rollout;
    assert.ok(matchesFilter(rollout, {}));
    assert.ok(matchesFilter(rollout, { status: 'failed', mode: 'debug', search: 'weather' }));
    assert.ok(matchesFilter(rollout, { search: 'oslo' }), 'the task input is searched');
    assert.equal(matchesFilter(rollout, { status: 'succeeded' }), false);
    assert.equal(matchesFilter(rollout, { mode: 'train' }), false);
    assert.equal(matchesFilter(rollout, { search: 'paris' }), false);
  });
});

describe('the panel’s step headings', () => {
  it('show each call that was not a whole answer by its outcome, and a retry as "retry of #N"', () => {
    const calls = faultyCalls();
    assert.deepEqual(
      calls.map((call) => {
        const heading = stepHeading(call, calls);
        return [call.sequence, heading.badge, heading.error];
      }),
      [
        [1, 'HTTP 429', ' upstream HTTP 429: the model is overloaded'],
        [2, 'retry of #1', null],
        [3, 'HTTP 500', ' upstream HTTP 500: the model is overloaded'],
        [4, 'retry of #3', null],
        [5, 'cancelled', ' cancelled: the client went away'],
        [6, 'truncated (stream content limit)', null],
        [7, null, null],
      ],
    );
    assert.deepEqual(stepHeading(calls[1]!, calls), {
      kind: 'llm',
      name: 'chat gpt-4o-mini',
      meta: ' 50 ms',
      error: null,
      badge: 'retry of #1',
    });
    // A retry whose attempt is not among the spans the panel holds still says it is one.
    assert.equal(stepHeading(calls[1]!, calls.slice(1)).badge, 'retry');
  });
});
