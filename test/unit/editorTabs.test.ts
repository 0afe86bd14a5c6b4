/**
 * The editor tabs' view logic in plain Node: the timeline's layout and viewport, the comparison's
 * step alignment and word diff, an LLM call read as a conversation (OpenAI, Anthropic, Gemini,
 * Responses shapes), a tab's saved state read back after a reload (the serializer's input), and
 * the full-size charts of the one chart module.
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
import {
  EditorToExtension,
  ExtensionToEditor,
  restoreEditorState,
} from '../../trainer-daemon/protocol/ui/editorMessages';
import {
  editorKey,
  initialMessagesText,
  readInitialMessages,
  tabTitle,
} from '../../trainer-daemon/protocol/ui/editorTarget';
import { runCharts } from '../../webview/editor/runCharts';
import { isSlim, slimSpan } from '../../trainer-daemon/protocol/slimSpan';
import { bandChartSvg, stepAt } from '../../trainer-daemon/protocol/ui/chart';
import { ExtensionToWebview, WebviewToExtension } from '../../trainer-daemon/protocol/ui/panelMessages';
import { grpoBatchId, grpoIterationBatchId, type Json, type Rollout } from '../../trainer-daemon/protocol';
import { agentRollout, faultyCalls, span, spanId } from '../helpers/editorFixtures';
import { detailHeading } from '../../webview/editor/detailHeading';

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

describe('spans slimmed for a tab', () => {
  it('cuts a long conversation to its system prompt and last turns, long strings too; the step still compares', () => {
    const spans = agentRollout(40);
    const last = spans.at(-2)!;
    const slim = slimSpan(last);
    assert.ok(isSlim(slim));
    const request = slim.attributes['lightning.request'] as { messages: Array<{ role: string; content: string }> };
    assert.deepEqual(
      request.messages.map((m) => m.role),
      ['system', 'user', 'assistant', 'user'],
    );
    const [slimStep, wholeStep] = [compareSteps([slim])[0]!, compareSteps([last])[0]!];
    assert.deepEqual([slimStep.prompt, slimStep.answer], [wholeStep.prompt, wholeStep.answer]);
    assert.equal(slimSpan(spans[1]!), spans[1], 'a short span is passed on as it is');
    const long = slimSpan(span({ sequence: 9, attributes: { output: 'x'.repeat(10_000) } }));
    assert.equal((long.attributes.output as string).length, 4_001);
    assert.ok(isSlim(long));
  });
});

describe('editor tabs: saved state and messages', () => {
  it('reads a saved state back after a reload, with defaults; says what is wrong with a bad one', () => {
    const restored = restoreEditorState({ target: { kind: 'rollout', rolloutId: 'ro-1' } });
    assert.deepEqual(restored, {
      ok: true,
      state: {
        target: { kind: 'rollout', rolloutId: 'ro-1' },
        preview: false,
        selectedSpanId: null,
        overlayRunId: null,
      },
    });
    const run = restoreEditorState({ target: { kind: 'run', runId: 'train-1' }, overlayRunId: 'train-0' });
    assert.ok(run.ok && run.state.overlayRunId === 'train-0');
    // The run tab's smoothing and the rollout tab's dragged waterfall height come back; out of range, they are refused.
    const kept = restoreEditorState({ target: { kind: 'run', runId: 'train-1' }, smoothing: 0.8, timelineHeight: 300 });
    assert.ok(kept.ok && kept.state.smoothing === 0.8 && kept.state.timelineHeight === 300);
    assert.equal(restoreEditorState({ target: { kind: 'run', runId: 'train-1' }, smoothing: 1.5 }).ok, false);
    assert.deepEqual(restoreEditorState(undefined), { ok: false, error: 'the tab saved no state' });
    const bad = restoreEditorState({ target: { kind: 'rollout', rolloutId: '' } });
    assert.equal(bad.ok, false);
    assert.match(!bad.ok ? bad.error : '', /target\.rolloutId/);
    assert.equal(restoreEditorState({ target: { kind: 'spreadsheet' } }).ok, false);
    assert.match(
      (restoreEditorState({ target: { kind: 'rollout', rolloutId: 'r' }, selectedSpanId: 'nope' }) as { error: string })
        .error,
      /selectedSpanId/,
    );
  });

  it('finds one tab per target (a pair in either order) and titles it', () => {
    assert.equal(
      editorKey({ kind: 'compare', left: 'b', right: 'a' }),
      editorKey({ kind: 'compare', left: 'a', right: 'b' }),
    );
    assert.notEqual(editorKey({ kind: 'rollout', rolloutId: 'a' }), editorKey({ kind: 'run', runId: 'a' }));
    const state = {
      target: { kind: 'rollout' as const, rolloutId: 'ro-123456789012345' },
      preview: true,
      selectedSpanId: null,
      overlayRunId: null,
    };
    assert.equal(tabTitle(state), 'Rollout ro-123456789… (preview)');
    assert.equal(tabTitle({ ...state, preview: false }, { label: 'sums task 3' } as Rollout), 'sums task 3');
    const pair = { ...state, target: { kind: 'compare' as const, left: 'ro-a', right: 'ro-b' } };
    assert.equal(tabTitle(pair), 'Compare ro-a ↔ ro-b (preview)');
    assert.equal(tabTitle({ ...pair, preview: false }), 'Compare ro-a ↔ ro-b');
  });

  it('validates the tabs’ and the side bar’s new messages', () => {
    assert.ok(
      EditorToExtension.safeParse({ type: 'annotate', rolloutId: 'ro-1', spanId: spanId(3), value: 1, comment: 'good' })
        .success,
    );
    assert.ok(
      EditorToExtension.safeParse({ type: 'openIterationRollout', runId: 'train-1', step: 2, which: 'worst' }).success,
    );
    assert.equal(
      EditorToExtension.safeParse({ type: 'openIterationRollout', runId: 'train-1', step: 2, which: 'median' }).error
        ?.issues[0]?.path[0],
      'which',
    );
    assert.ok(
      ExtensionToEditor.safeParse({ type: 'spans', rolloutId: 'ro-1', spans: agentRollout(2), complete: true }).success,
    );
    assert.ok(WebviewToExtension.safeParse({ type: 'openRolloutTab', id: 'ro-1', mode: 'beside' }).success);
    assert.equal(
      WebviewToExtension.safeParse({ type: 'openRolloutTab', id: 'ro-1', mode: 'floating' }).error?.issues[0]?.path[0],
      'mode',
    );
    assert.ok(WebviewToExtension.safeParse({ type: 'compareRollouts', left: 'a', right: 'b' }).success);
    // The trajectory header's Ray node: optional, and a node when given.
    const node = { nodeId: 'ab12', ip: '10.0.0.5', host: 'gpu-1' };
    assert.deepEqual(ExtensionToWebview.safeParse({ type: 'servedBy', rolloutId: 'ro-1', policy: null, node }).data, {
      type: 'servedBy',
      rolloutId: 'ro-1',
      policy: null,
      node,
    });
    assert.ok(ExtensionToWebview.safeParse({ type: 'servedBy', rolloutId: 'ro-1', policy: null }).success);
    // A tab shows the rollout's steps: the panel shows its summary (Show Tab, Show Here).
    assert.ok(ExtensionToWebview.safeParse({ type: 'rolloutInTab', rolloutId: 'ro-1', inTab: true }).success);
    assert.ok(!ExtensionToWebview.safeParse({ type: 'rolloutInTab', rolloutId: 'ro-1' }).success);
    assert.deepEqual(
      ExtensionToWebview.safeParse({ type: 'servedBy', rolloutId: 'ro-1', policy: null, node: { ip: '10.0.0.5' } })
        .error?.issues[0]?.path,
      ['node', 'nodeId'],
    );
  });

  it('writes a new tab’s first messages into its page so that no span can end the script element they sit in', () => {
    const hostile = span({
      sequence: 2,
      name: '</script><script>alert(1)</script>',
      attributes: { 'lightning.response': '<!-- </SCRIPT> -->' },
    });
    const messages = [
      {
        type: 'show' as const,
        state: {
          target: { kind: 'rollout' as const, rolloutId: 'ro-1' },
          preview: true,
          selectedSpanId: null,
          overlayRunId: null,
        },
      },
      { type: 'spans' as const, rolloutId: 'ro-1', spans: [hostile], complete: true },
    ];
    const text = initialMessagesText(messages);
    assert.ok(!text.includes('<'), 'no < in what the page carries');
    const read = readInitialMessages(text);
    assert.deepEqual(read, messages);
    assert.ok(read.every((message) => ExtensionToEditor.safeParse(message).success));
    assert.deepEqual(readInitialMessages('{"type":"show"}'), []);
    assert.deepEqual(readInitialMessages('not json'), []);
    assert.deepEqual(readInitialMessages(undefined), []);
  });

  it('finds a GRPO iteration’s training batch as the run names it', () => {
    assert.equal(grpoIterationBatchId('train-1', 3), grpoBatchId('train-1', 'train', 2));
    assert.equal(grpoIterationBatchId('train-1', 1), 'train-1-train-0');
  });
});

describe('full-size charts (the one chart module)', () => {
  it('draws grid lines and another run dashed on the same axes; the pointer finds the nearest iteration', () => {
    const points = [
      { step: 1, value: 0.2 },
      { step: 2, value: 0.4 },
      { step: 3, value: 0.6 },
    ];
    const svg = bandChartSvg(points, {
      label: 'reward',
      format: String,
      width: 560,
      height: 220,
      yTicks: 3,
      overlay: {
        points: [
          { step: 1, value: 0.1 },
          { step: 4, value: 0.8 },
        ],
        colour: '--vscode-charts-red',
        label: 'train-0',
      },
    });
    // Round grid lines over 0.1–0.8 by 0.2: 0.0, 0.2, …, 0.8.
    assert.equal(svg.match(/class="grid"/g)?.length, 5);
    assert.match(svg, /class="series overlay" data-name="train-0"[^>]*stroke-dasharray/);
    // The x axis spans both runs' iterations: 1 to 4 (labels "0.0": 4 + 18 px on the left).
    assert.match(svg, /data-first="1" data-last="4" data-left="22" data-plot-width="530"/);
    assert.equal(stepAt(22 + 530 * 0.6, { first: 1, last: 4, left: 22, plotWidth: 530 }, [1, 2, 3, 4]), 3);
    // Grid labels are round values, written alike.
    const rate = bandChartSvg(
      [
        { step: 1, value: 1_000 },
        { step: 2, value: 1_100 },
      ],
      { label: 'rate', format: String, unit: 'rate', yTicks: 3 },
    );
    assert.deepEqual(
      [...rate.matchAll(/class="y-tick"[^>]*>([^<]*)</g)].map((m) => m[1]),
      ['1.00k', '1.05k', '1.10k'],
    );
    assert.equal(stepAt(0, { first: 1, last: 4, left: 22, plotWidth: 530 }, [1, 2, 3]), 1);
  });

  it('charts any algorithm’s metrics: GRPO’s named charts, else one per metric', () => {
    assert.deepEqual(
      runCharts('grpo', [
        { step: 1, name: 'loss', value: 2, timeMs: 0 },
        { step: 1, name: 'reward/mean', value: 0.5, timeMs: 0 },
      ]).map((chart) => chart.metric),
      ['reward/mean', 'loss'],
    );
    assert.deepEqual(
      runCharts('apo', [
        { step: 1, name: 'best_val_score', value: 0.5, timeMs: 0 },
        { step: 2, name: 'best_val_score', value: 0.7, timeMs: 0 },
      ]).map((chart) => chart.summary),
      ['best_val_score: 0.5 → 0.7'],
    );
  });
});

describe('the rollout tab’s heading of the selected span', () => {
  it('shows a call that was not a whole answer by its outcome, and a retry as "retry of #N", slimmed or whole', () => {
    const calls = faultyCalls();
    const badges = [
      'HTTP 429',
      'retry of #1',
      'HTTP 500',
      'retry of #3',
      'cancelled',
      'truncated (stream content limit)',
      null,
    ];
    assert.deepEqual(
      calls.map((call) => detailHeading(call, calls).badge),
      badges,
    );
    // The tab holds spans slimmed (a long conversation cut) until one is shown whole: the badges read the same.
    const long = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x'.repeat(5_000) }] };
    const tab = new Map(
      calls.map((call) => [
        call.sequence,
        slimSpan({ ...call, attributes: { ...call.attributes, 'lightning.request': long } }),
      ]),
    );
    assert.ok([...tab.values()].every(isSlim));
    assert.deepEqual(
      [...tab.values()].map((call) => detailHeading(call, tab.values()).badge),
      badges,
    );
    assert.deepEqual(detailHeading(tab.get(4)!, tab.values()), {
      kind: 'llm',
      name: detailHeading(tab.get(4)!, calls).name,
      meta: ' 50 ms · #4 · chat gpt-4o-mini',
      error: null,
      badge: 'retry of #3',
    });
    assert.equal(detailHeading(calls[0]!, calls).error, ' upstream HTTP 429: the model is overloaded');
  });
});
