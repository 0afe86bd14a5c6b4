/**
 * The editor tabs' state in plain Node (editorTabs.test.ts: their layout, comparison and conversation): spans
 * slimmed for a tab, a tab's saved state read back after a reload (the serializer's input) and its messages, the
 * full-size charts of the one chart module, the heading of the selected span.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareSteps } from '../../webview/editor/compareLogic';
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
import { grpoBatchId, grpoIterationBatchId, type Rollout } from '../../trainer-daemon/protocol';
import { agentRollout, faultyCalls, span, spanId } from '../helpers/editorFixtures';
import { detailHeading } from '../../webview/editor/detailHeading';

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
