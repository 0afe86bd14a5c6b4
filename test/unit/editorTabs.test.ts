/**
 * The editor tabs' view logic in plain Node: the timeline's layout and viewport, the comparison's
 * step alignment and word diff, an LLM call read as a conversation (OpenAI, Anthropic, Gemini,
 * Responses shapes). editorTabState.test.ts: a tab's spans, saved state, messages, charts and heading.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  barPixels,
  clampViewport,
  layoutTimeline,
  MAX_DEPTH,
  nextStep,
  panViewport,
  rowAt,
  timeTicks,
  visibleRows,
  zoomViewport,
} from '../../webview/editor/timelineLayout';
import { alignSteps, compareSteps, compareTotals, wordDiff } from '../../webview/editor/compareLogic';
import { conversationOf, turnText } from '../../webview/editor/conversation';
import { type Json } from '../../trainer-daemon/protocol';
import { agentRollout, span, spanId } from '../helpers/editorFixtures';

describe('timeline layout', () => {
  it('nests spans under their parents depth-first, siblings by start, bars relative to the first start', () => {
    const spans = [
      span({ sequence: 3, parentSpanId: spanId(1), name: 'second child', startMs: 1_050, endMs: 1_060 }),
      span({ sequence: 1, name: 'root', startMs: 1_000, endMs: 1_100 }),
      span({
        sequence: 2,
        parentSpanId: spanId(1),
        name: 'first child',
        startMs: 1_010,
        endMs: 1_040,
        statusCode: 'error',
        statusMessage: 'boom',
      }),
      span({ sequence: 4, parentSpanId: spanId(2), name: 'grandchild', startMs: 1_020, endMs: null }),
      span({ sequence: 5, parentSpanId: 'f'.repeat(16), name: 'orphan', startMs: 1_200, endMs: 1_210 }),
    ];
    const layout = layoutTimeline(spans, 1_300);
    assert.deepEqual(
      layout.rows.map((row) => [row.span.name, row.depth]),
      [
        ['root', 0],
        ['first child', 1],
        ['grandchild', 2],
        ['second child', 1],
        ['orphan', 0],
      ],
    );
    assert.equal(layout.originMs, 1_000);
    assert.deepEqual([layout.rows[1]!.start, layout.rows[1]!.end, layout.rows[1]!.error], [10, 40, true]);
    // A running span reaches the latest time seen (never before its own start).
    assert.equal(layout.rows[2]!.running, true);
    assert.equal(layout.rows[2]!.end, 300);
    assert.equal(layout.durationMs, 300);
    assert.equal(layout.indexOf.get(spanId(4)), 2);
    // A finished rollout's timeline ends at its last span, whatever the clock says now.
    assert.equal(
      layoutTimeline(
        spans.filter((s) => s.endMs !== null),
        99_999_999,
      ).durationMs,
      210,
    );
  });

  it('keeps every span of bad data: a parent cycle, a 2,000-deep chain (no stack overflow, depth capped)', () => {
    const cycle = layoutTimeline([
      span({ sequence: 1, parentSpanId: spanId(2) }),
      span({ sequence: 2, parentSpanId: spanId(1) }),
    ]);
    assert.equal(cycle.rows.length, 2);
    const chain = Array.from({ length: 2_000 }, (_, i) =>
      span({ sequence: i + 1, parentSpanId: i === 0 ? null : spanId(i), startMs: 1_000 + i }),
    );
    const layout = layoutTimeline(chain);
    assert.equal(layout.rows.length, 2_000);
    assert.equal(Math.max(...layout.rows.map((row) => row.depth)), MAX_DEPTH);
  });

  it('zooms around the pointer, pans, and stays inside the rollout', () => {
    const full = { from: 0, to: 1_000 };
    const zoomed = zoomViewport(full, 0.5, 0.25, 1_000);
    // The time under the pointer (250 ms, a quarter across) stays a quarter across.
    assert.deepEqual(zoomed, { from: 125, to: 625 });
    assert.deepEqual(panViewport(zoomed, 0.5, 1_000), { from: 375, to: 875 });
    assert.deepEqual(panViewport(zoomed, 5, 1_000), { from: 500, to: 1_000 });
    assert.deepEqual(zoomViewport(full, 4, 0.5, 1_000), full);
    assert.ok(zoomViewport(full, 1e-9, 0.5, 1_000).to - zoomViewport(full, 1e-9, 0.5, 1_000).from >= 0.1);
    assert.deepEqual(clampViewport({ from: -50, to: 50 }, 1_000), { from: 0, to: 100 });
  });

  it('maps bars, rows and ticks to pixels', () => {
    assert.deepEqual(barPixels({ start: 250, end: 500 }, { from: 0, to: 1_000 }, 400), { x: 100, width: 100 });
    // An instant span is still 2 px wide; one outside the window is not drawn.
    assert.deepEqual(barPixels({ start: 500, end: 500 }, { from: 0, to: 1_000 }, 400), { x: 200, width: 2 });
    assert.equal(barPixels({ start: 10, end: 20 }, { from: 100, to: 200 }, 400), null);
    assert.deepEqual(visibleRows(220, 110, 22, 2_000, 0), { first: 10, last: 15 });
    assert.equal(rowAt(5, 44, 22, 10), 2);
    assert.equal(rowAt(500, 0, 22, 10), -1);
    assert.deepEqual(timeTicks({ from: 0, to: 1_000 }, 450), [0, 200, 400, 600, 800, 1_000]);
    assert.deepEqual(timeTicks({ from: 3, to: 3.5 }, 500), [3, 3.1, 3.2, 3.3, 3.4, 3.5]);
  });

  it('j / k move between LLM calls only', () => {
    const layout = layoutTimeline(agentRollout(3));
    const llm = layout.rows.flatMap((row, index) => (row.category === 'llm' ? [index] : []));
    assert.equal(nextStep(layout, -1, 1), llm[0]);
    assert.equal(nextStep(layout, llm[0]!, 1), llm[1]);
    assert.equal(nextStep(layout, llm[1]!, -1), llm[0]);
    assert.equal(nextStep(layout, llm[2]!, 1), llm[2]);
  });
});

describe('compare two rollouts', () => {
  it('aligns alike steps and leaves a gap where one rollout has an extra step', () => {
    const left = compareSteps(agentRollout(5));
    // The right one retried step 2: an extra call asking something else in between.
    const right = compareSteps(
      agentRollout(6, {
        question: (i) =>
          i === 2
            ? 'Please retry the tool call, it failed with a timeout'
            : `What is ${i > 2 ? i - 1 : i} plus ${i > 2 ? i - 1 : i}?`,
        answer: (i) => (i === 2 ? 'Retrying now' : `The answer is ${2 * (i > 2 ? i - 1 : i)}.`),
      }),
    );
    const pairs = alignSteps(left, right);
    assert.deepEqual(
      pairs.map((pair) => [pair.left, pair.right]),
      [
        [0, 0],
        [1, 1],
        [null, 2],
        [2, 3],
        [3, 4],
        [4, 5],
      ],
    );
    assert.equal(pairs[0]!.similarity, 1);
    assert.equal(left[1]!.prompt, 'What is 1 plus 1?');
    assert.equal(left[1]!.answer, 'The answer is 2.\nadd({"a":1,"b":1})');
    assert.deepEqual(compareTotals(left), { steps: 5, tokens: 5 * 19 + 10, latencyMs: 100 });
  });

  it('diffs words, keeping whitespace with them', () => {
    assert.deepEqual(wordDiff('the answer is 4', 'the answer is 5'), [
      { op: 'same', text: 'the answer is' },
      { op: 'removed', text: ' 4' },
      { op: 'added', text: ' 5' },
    ]);
    assert.deepEqual(wordDiff('a b c', 'a x b c'), [
      { op: 'same', text: 'a' },
      { op: 'added', text: ' x' },
      { op: 'same', text: ' b c' },
    ]);
    assert.deepEqual(wordDiff('same', 'same'), [{ op: 'same', text: 'same' }]);
    assert.deepEqual(wordDiff('', 'new text'), [{ op: 'added', text: 'new text' }]);
    const before = 'word '.repeat(3_000);
    // Each side reads back from its own parts and the common ones.
    const parts = wordDiff(before, `${before}tail`);
    assert.equal(
      parts
        .filter((part) => part.op !== 'added')
        .map((part) => part.text)
        .join(''),
      before,
    );
    assert.equal(
      parts
        .filter((part) => part.op !== 'removed')
        .map((part) => part.text)
        .join(''),
      `${before}tail`,
    );
    assert.deepEqual(parts.slice(1), [
      { op: 'removed', text: ' ' },
      { op: 'added', text: ' tail' },
    ]);
  });
});

describe('an LLM call as a conversation', () => {
  const llm = (request: Json, response: Json | undefined): ReturnType<typeof conversationOf> =>
    conversationOf(
      span({
        sequence: 1,
        category: 'llm',
        promptTokens: 10,
        completionTokens: 4,
        attributes: {
          'lightning.request': request,
          ...(response === undefined ? {} : { 'lightning.response': response }),
        },
      }),
    );

  it('reads OpenAI chat completions: roles, tool calls with arguments, tool results, reasoning, usage', () => {
    const call = llm(
      {
        model: 'gpt',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: [{ type: 'text', text: 'Add 2 and 2' }] },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":2}' } }],
          },
          { role: 'tool', tool_call_id: 'c1', content: '4' },
        ],
        tools: [{ type: 'function', function: { name: 'add', description: 'adds' } }],
      },
      {
        choices: [{ message: { role: 'assistant', content: 'It is 4.', reasoning_content: 'Simple sum.' } }],
        usage: { completion_tokens_details: { reasoning_tokens: 3 } },
      },
    );
    assert.deepEqual(
      call.turns.map((turn) => turn.role),
      ['system', 'user', 'assistant', 'tool'],
    );
    assert.deepEqual(call.turns[2]!.blocks, [{ kind: 'toolCall', name: 'add', arguments: '{"a":2,"b":2}', id: 'c1' }]);
    assert.deepEqual(call.turns[3]!.blocks, [{ kind: 'toolResult', text: '4', id: 'c1' }]);
    assert.deepEqual(call.response[0]!.blocks, [
      { kind: 'thinking', text: 'Simple sum.' },
      { kind: 'text', text: 'It is 4.' },
    ]);
    assert.equal(turnText(call.response[0]!), 'It is 4.');
    assert.deepEqual(call.tools, [{ name: 'add', description: 'adds' }]);
    assert.deepEqual([call.model, call.promptTokens, call.completionTokens, call.reasoningTokens], ['gpt', 10, 4, 3]);
  });

  it('reads Anthropic Messages: a system prompt, tool_use / tool_result blocks, thinking', () => {
    const call = llm(
      {
        model: 'claude',
        system: [{ type: 'text', text: 'You are terse.' }],
        messages: [
          { role: 'user', content: 'Weather?' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'tu1', name: 'weather', input: { city: 'Paris' } }] },
          {
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: 'tu1', content: [{ type: 'text', text: 'sunny' }] }],
          },
        ],
      },
      {
        type: 'message',
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'It said sunny.' },
          { type: 'text', text: 'Sunny.' },
        ],
      },
    );
    assert.deepEqual(
      call.turns.map((turn) => turn.role),
      ['system', 'user', 'assistant', 'tool'],
    );
    assert.deepEqual(call.turns[2]!.blocks[0], {
      kind: 'toolCall',
      name: 'weather',
      arguments: '{"city":"Paris"}',
      id: 'tu1',
    });
    assert.deepEqual(call.turns[3]!.blocks[0], { kind: 'toolResult', text: 'sunny', id: 'tu1' });
    assert.deepEqual(
      call.response[0]!.blocks.map((block) => block.kind),
      ['thinking', 'text'],
    );
  });

  it('reads Gemini: systemInstruction, contents with parts, a function call, the candidate', () => {
    const call = llm(
      {
        systemInstruction: { parts: [{ text: 'Answer in French.' }] },
        contents: [
          { role: 'user', parts: [{ text: 'Hello' }] },
          { role: 'model', parts: [{ functionCall: { name: 'greet', args: { to: 'you' } } }] },
          { role: 'user', parts: [{ functionResponse: { name: 'greet', response: { ok: true } } }] },
        ],
        tools: [{ functionDeclarations: [{ name: 'greet', description: 'greets' }] }],
      },
      {
        candidates: [
          { content: { role: 'model', parts: [{ text: 'thinking…', thought: true }, { text: 'Bonjour' }] } },
        ],
        usageMetadata: { thoughtsTokenCount: 5 },
        modelVersion: 'gemini-2',
      },
    );
    assert.deepEqual(
      call.turns.map((turn) => turn.role),
      ['system', 'user', 'assistant', 'tool'],
    );
    assert.equal(call.turns[2]!.blocks[0]!.kind, 'toolCall');
    assert.deepEqual(call.response[0]!.blocks, [
      { kind: 'thinking', text: 'thinking…' },
      { kind: 'text', text: 'Bonjour' },
    ]);
    assert.deepEqual(call.tools, [{ name: 'greet', description: 'greets' }]);
    assert.equal(call.reasoningTokens, 5);
    assert.equal(call.model, 'gemini-2');
  });

  it('reads the Responses API and OpenTelemetry attributes; an unknown part is kept as JSON', () => {
    const call = llm(
      {
        instructions: 'Be kind.',
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'hi' },
              { type: 'mystery', x: 1 },
            ],
          },
          { type: 'function_call', name: 'f', arguments: '{}', call_id: 'x' },
          { type: 'function_call_output', call_id: 'x', output: 'done' },
        ],
      },
      {
        output: [
          { type: 'reasoning', summary: [{ text: 'why' }] },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello!' }] },
        ],
      },
    );
    assert.deepEqual(
      call.turns.map((turn) => turn.role),
      ['system', 'user', 'assistant', 'tool'],
    );
    assert.deepEqual(call.turns[1]!.blocks, [
      { kind: 'text', text: 'hi' },
      { kind: 'text', text: '{"type":"mystery","x":1}' },
    ]);
    assert.deepEqual(call.response[0]!.blocks, [
      { kind: 'thinking', text: 'why' },
      { kind: 'text', text: 'Hello!' },
    ]);
    const otel = conversationOf(
      span({
        sequence: 1,
        category: 'llm',
        attributes: {
          'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: 'q' }] }]),
          'gen_ai.completion': 'a',
        },
      }),
    );
    assert.deepEqual(otel.turns, [{ role: 'user', blocks: [{ kind: 'text', text: 'q' }] }]);
    assert.deepEqual(otel.response, [{ role: 'assistant', blocks: [{ kind: 'text', text: 'a' }] }]);
  });
});
