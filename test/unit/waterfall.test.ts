/**
 * The rollout tab's waterfall, its pure parts: the rollout as the root row with its real duration, rows named
 * by what they did, and the layout that keeps every text inside the timeline and sizes it to its rows.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Rollout } from '../../trainer-daemon/protocol';
import {
  barPixels,
  barTextPlacement,
  isRootSpan,
  layoutTimeline,
  nameColumnWidth,
  nextStep,
  rolloutRootSpan,
  ROOT_SPAN_ID,
  tickLabelPlacement,
  timelineHeight,
} from '../../webview/editor/timelineLayout';
import { argumentsText, firstWords, spanLabel } from '../../webview/editor/spanLabel';
import { describeRow } from '../../webview/editor/timelineView';
import { agentRollout, span } from '../helpers/editorFixtures';

const rollout = (extra: Partial<Rollout> = {}): Rollout => ({
  id: 'ro-1',
  status: 'succeeded',
  mode: 'debug',
  label: 'Weather agent',
  task: null,
  datasetId: null,
  batchId: null,
  source: { kind: 'launch', name: 'Weather agent' },
  resourcesVersion: null,
  maxAttempts: 1,
  attemptCount: 1,
  createdAt: 900,
  updatedAt: 2_650,
  startedAt: 1_000,
  endedAt: 2_650,
  error: null,
  exitCode: 0,
  spanCount: 3,
  llmCalls: 2,
  promptTokens: 30,
  completionTokens: 14,
  reward: null,
  ...extra,
});

describe('the waterfall’s root row', () => {
  // Three spans in the first 60 ms of a 1.65 s rollout (the agent's start-up and exit are outside every span).
  const spans = [
    span({ sequence: 1, category: 'llm', startMs: 1_200, endMs: 1_230 }),
    span({ sequence: 2, category: 'tool', startMs: 1_230, endMs: 1_240 }),
    span({ sequence: 3, category: 'llm', startMs: 1_240, endMs: 1_260 }),
  ];

  it('is the whole rollout, start to end, with the spans under it', () => {
    const layout = layoutTimeline(spans, 99_999, rolloutRootSpan(rollout(), 'Weather agent'));
    assert.equal(layout.rows.length, 4);
    const root = layout.rows[0]!;
    assert.ok(isRootSpan(root.span));
    assert.equal(root.span.spanId, ROOT_SPAN_ID);
    assert.deepEqual([root.start, root.end, root.depth], [0, 1_650, 0]);
    assert.equal(layout.durationMs, 1_650, 'the rollout’s 1.65 s, not the spans’ 60 ms');
    assert.equal(layout.originMs, 1_000);
    assert.deepEqual(
      layout.rows.slice(1).map((row) => [row.depth, row.start]),
      [
        [1, 200],
        [1, 230],
        [1, 240],
      ],
    );
    assert.equal(nextStep(layout, -1, 1), 1, 'j goes to the first LLM call, past the root');
    assert.match(describeRow(root), /^rollout Weather agent · 1\.65 s/);
    // Without a rollout the spans are laid out as before.
    assert.equal(layoutTimeline(spans).durationMs, 60);
  });

  it('spans timed by a clock years off the daemon’s (an agent elsewhere, an imported store) set the axis instead', () => {
    const yearsAgo = spans.map((s) => ({ ...s, startMs: s.startMs - 3e10, endMs: s.endMs! - 3e10 }));
    const layout = layoutTimeline(yearsAgo, 99_999, rolloutRootSpan(rollout(), 'Weather agent'));
    assert.equal(layout.durationMs, 60, 'the spans’ 60 ms, not 950 years');
    assert.deepEqual([layout.rows[0]!.start, layout.rows[0]!.end], [0, 60]);
    // Within a minute of the rollout's times the rollout's own duration stands.
    const nearly = spans.map((s) => ({ ...s, startMs: s.startMs - 30_000, endMs: s.endMs! - 30_000 }));
    assert.equal(
      layoutTimeline(nearly, 99_999, rolloutRootSpan(rollout(), 'r')).durationMs,
      31_450,
      'from the first span to the rollout’s end',
    );
  });

  it('is open while the rollout runs, failed with the rollout’s reason, and carries the rollout’s facts', () => {
    const running = rolloutRootSpan(rollout({ status: 'running', endedAt: null }), 'r');
    assert.equal(running.endMs, null);
    const layout = layoutTimeline(spans, 5_000, running);
    assert.ok(layout.rows[0]!.running);
    assert.equal(layout.durationMs, 4_000, 'a running rollout reaches now');
    const failed = rolloutRootSpan(
      rollout({ status: 'failed', error: 'exited with code 1', exitCode: 1, task: { input: { city: 'Paris' } } }),
      'r',
    );
    assert.deepEqual([failed.statusCode, failed.statusMessage], ['error', 'exited with code 1']);
    assert.deepEqual(failed.attributes['rollout.task'], { city: 'Paris' });
    assert.equal(failed.attributes['rollout.exitCode'], 1);
    // A rollout not started yet (queued) starts at its creation.
    assert.equal(rolloutRootSpan(rollout({ status: 'queued', startedAt: null, endedAt: null }), 'r').startMs, 900);
  });
});

describe('row names: what a span did', () => {
  it('names an LLM call by its model and the first words of its answer, or the tools it called', () => {
    const [, call] = agentRollout(1);
    assert.equal(call!.name, 'chat test-model');
    assert.equal(spanLabel(call!), 'test-model → add(a: 0, b: 0)');
    const answered = span({
      sequence: 9,
      category: 'llm',
      name: 'chat gpt-4o-mini',
      attributes: {
        'lightning.request': { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Weather in Paris?' }] },
        'lightning.response': {
          model: 'gpt-4o-mini-2024-07-18',
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: 'It is sunny in Paris today, 24 °C with a light breeze from the west all afternoon.',
              },
            },
          ],
        },
      },
    });
    assert.equal(spanLabel(answered), 'gpt-4o-mini · “It is sunny in Paris today, 24 °C with a light…”');
    const failed = span({
      sequence: 10,
      category: 'llm',
      name: 'chat gpt-4o-mini',
      statusCode: 'error',
      statusMessage: 'upstream 429: rate limited',
      attributes: { 'gen_ai.request.model': 'gpt-4o-mini' },
    });
    assert.equal(spanLabel(failed), 'gpt-4o-mini · upstream 429: rate limited');
  });

  it('names a tool by its name and arguments (GenAI, OpenInference, or its span name)', () => {
    assert.equal(
      spanLabel(
        span({
          sequence: 11,
          category: 'tool',
          name: 'execute_tool get_weather',
          attributes: { 'gen_ai.tool.name': 'get_weather', 'gen_ai.tool.call.arguments': '{"city":"Paris"}' },
        }),
      ),
      'get_weather(city: "Paris")',
    );
    assert.equal(
      spanLabel(
        span({ sequence: 12, category: 'tool', name: 'tool add', attributes: { 'input.value': '{"a":1,"b":2}' } }),
      ),
      'add(a: 1, b: 2)',
    );
    assert.equal(spanLabel(span({ sequence: 13, category: 'tool', name: 'lookup' })), 'lookup()');
    assert.equal(spanLabel(span({ sequence: 14, category: 'agent', name: 'agent run' })), 'agent run');
  });

  it('cuts long text at a word, on one line', () => {
    assert.equal(firstWords('one  two\nthree'), 'one two three');
    assert.equal(firstWords('alpha beta gamma delta', 12), 'alpha beta…');
    assert.equal(argumentsText('not json at all'), 'not json at all');
    assert.equal(argumentsText(undefined), '');
    assert.equal(argumentsText([1, 2]), '[1,2]');
  });
});

describe('the waterfall’s layout: nothing clipped, sized to its rows', () => {
  it('puts a bar’s text after it, inside its end, or before it, never past the plot', () => {
    const plot = 400;
    assert.deepEqual(barTextPlacement({ x: 10, width: 50 }, 40, plot), { x: 64, align: 'left', inside: false });
    // The last bar reaches the right edge: its text goes inside its end…
    assert.deepEqual(barTextPlacement({ x: 300, width: 100 }, 40, plot), { x: 396, align: 'right', inside: true });
    // …or, for a bar too short for it, before its start.
    assert.deepEqual(barTextPlacement({ x: 390, width: 10 }, 40, plot), { x: 386, align: 'right', inside: false });
    for (const bar of [
      { x: 0, width: 400 },
      { x: 399, width: 2 },
      { x: 200, width: 150 },
      { x: 0, width: 2 },
    ]) {
      const place = barTextPlacement(bar, 60, plot);
      const [left, right] = place.align === 'left' ? [place.x, place.x + 60] : [place.x - 60, place.x];
      assert.ok(left >= 0 && right <= plot, JSON.stringify({ bar, place }));
    }
    // A whole rollout's bar (the root row) fills the plot.
    assert.deepEqual(barPixels({ start: 0, end: 1_650 }, { from: 0, to: 1_650 }, plot), { x: 0, width: 400 });
  });

  it('ends the last tick’s label at the right edge', () => {
    assert.deepEqual(tickLabelPlacement(100, 30, 500), { x: 102, align: 'left' });
    assert.deepEqual(tickLabelPlacement(495, 30, 500), { x: 493, align: 'right' });
  });

  it('is as tall as its rows up to a share of the tab, or as the user dragged it', () => {
    const options = { rowHeight: 22, chrome: 29, maxHeight: 360, minHeight: 73 };
    assert.equal(timelineHeight(4, options), 29 + 4 * 22, 'three spans and the root: four rows, not a fixed box');
    assert.equal(timelineHeight(2_000, options), 360);
    assert.equal(timelineHeight(0, options), 73);
    assert.equal(timelineHeight(4, { ...options, userHeight: 500 }), 500, 'dragged taller than it would grow');
    assert.equal(timelineHeight(2_000, { ...options, userHeight: 10 }), 73);
    assert.deepEqual([nameColumnWidth(300), nameColumnWidth(700), nameColumnWidth(2_000)], [140, 238, 320]);
  });
});
