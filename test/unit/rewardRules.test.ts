import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RuleConfig, type Json } from '../../trainer-daemon/protocol';
import { applyRule } from '../../trainer-daemon/rewards/rules';
import { toScoringTask, toScoringTrajectory } from '../../trainer-daemon/rewards/trajectory';
import { Store } from '../../trainer-daemon/store/store';
import { recordRollout, type RecordedRollout } from '../helpers/rewards';
import { hex, llmSpan } from '../helpers/spans';
import { openStore } from '../helpers/store';

interface RuleCase {
  case: string;
  rule: unknown;
  answer: string | null;
  expected: Json;
  value?: number;
  skipped?: boolean;
}

const CASES = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', 'fixtures', 'rewards', 'rule-cases.json'), 'utf8'),
) as RuleCase[];

/** Records a rollout and reads it back as reward sources see it. */
function view(store: Store, rollout: RecordedRollout) {
  const [trajectory] = store.trajectoriesOf([recordRollout(store, rollout)]);
  return { trajectory: toScoringTrajectory(trajectory!), task: toScoringTask(trajectory!, undefined) };
}

describe('reward rules', () => {
  test('each answer rule against the fixture cases (recorded rollouts, expected answer in the task)', (t) => {
    const store = openStore(t);
    for (const c of CASES) {
      const { trajectory, task } = view(store, {
        answer: c.answer,
        task: { input: { question: 'q', expected: c.expected } },
      });
      const verdict = applyRule(RuleConfig.parse(c.rule), trajectory, task);
      if (c.skipped) assert.equal(verdict.kind, 'skipped', c.case);
      else assert.deepEqual([verdict.kind, verdict.kind === 'scored' && verdict.value], ['scored', c.value], c.case);
    }
  });

  test('the final answer is the last LLM call’s content, or the answer the agent reported', (t) => {
    const store = openStore(t);
    assert.equal(view(store, { answer: 'last words', tools: ['search'] }).trajectory.finalAnswer, 'last words');
    const reported = llmSpan({
      category: 'agent',
      name: 'agent run',
      attributes: { 'lightning.answer': 'the reported one' },
    });
    assert.equal(
      view(store, { answer: 'chatty text', extraSpans: [reported] }).trajectory.finalAnswer,
      'the reported one',
    );
    const structured = llmSpan({
      category: 'agent',
      name: 'agent run',
      attributes: { 'lightning.answer': { city: 'Paris' } },
    });
    assert.equal(view(store, { answer: 'x', extraSpans: [structured] }).trajectory.finalAnswer, '{"city":"Paris"}');
    // A last call that only asked for a tool has no content: no final answer.
    assert.equal(view(store, { answer: null }).trajectory.finalAnswer, null);
  });

  test('tool-called counts tool calls in LLM responses, or tool spans when the responses have none', (t) => {
    const store = openStore(t);
    const rule = RuleConfig.parse({ rule: 'tool-called', tool: 'search', min: 2 });
    const twice = view(store, { answer: 'a', tools: ['search', 'calc', 'search'] });
    assert.deepEqual(applyRule(rule, twice.trajectory, twice.task), {
      kind: 'scored',
      value: 1,
      reason: 'search called 2 times',
    });
    const once = view(store, { answer: 'a', tools: ['search'] });
    assert.equal((applyRule(rule, once.trajectory, once.task) as { value: number }).value, 0);
    const toolSpan = (name: string) =>
      llmSpan({ category: 'tool', name: `execute_tool ${name}`, attributes: { 'gen_ai.tool.name': name } });
    const spans = view(store, { answer: 'a', extraSpans: [toolSpan('search'), toolSpan('search')] });
    assert.deepEqual(
      spans.trajectory.toolCalls.map((c) => c.name),
      ['search', 'search'],
    );
    assert.equal((applyRule(rule, spans.trajectory, spans.task) as { value: number }).value, 1);
  });

  test('tool-called: a Responses function_call and a legacy function_call each count once', (t) => {
    const store = openStore(t);
    const request = { model: 'm', input: 'q', messages: [{ role: 'user', content: 'q' }] };
    const call = (api: string, response: Json): ReturnType<typeof llmSpan> =>
      llmSpan({ attributes: { 'lightning.api': api, 'lightning.request': request, 'lightning.response': response } });
    const searchCall = { type: 'function_call', call_id: 'c1', name: 'search', arguments: '{}' };
    const responses = call('responses', { id: 'resp_1', status: 'completed', output: [searchCall] });
    const legacyMessage = { role: 'assistant', content: null, function_call: { name: 'search', arguments: '{}' } };
    const legacy = call('chat.completions', { choices: [{ index: 0, message: legacyMessage }] });
    const { trajectory } = view(store, { answer: 'a', extraSpans: [responses, legacy] });
    assert.deepEqual(
      trajectory.toolCalls.map((c) => c.name),
      ['search', 'search'],
    );
  });

  test('penalties: errors, timeouts, too many steps, too many tokens', (t) => {
    const store = openStore(t);
    const score = (rule: unknown, rollout: RecordedRollout): number => {
      const { trajectory, task } = view(store, rollout);
      const verdict = applyRule(RuleConfig.parse(rule), trajectory, task);
      assert.equal(verdict.kind, 'scored');
      return (verdict as { value: number }).value;
    };
    assert.equal(score({ rule: 'error-penalty' }, { answer: 'a', status: 'failed' }), -1);
    const errorSpan = llmSpan({ category: 'tool', statusCode: 'error', traceId: hex(16) });
    assert.equal(score({ rule: 'error-penalty', value: -0.5 }, { answer: 'a', extraSpans: [errorSpan] }), -0.5);
    assert.equal(score({ rule: 'error-penalty' }, { answer: 'a' }), 0);
    assert.equal(score({ rule: 'timeout-penalty' }, { answer: 'a', status: 'timeout' }), -1);
    assert.equal(score({ rule: 'timeout-penalty' }, { answer: 'a', status: 'failed' }), 0);
    // Three tools + the answer = 4 LLM calls.
    assert.equal(score({ rule: 'steps-penalty', max: 3, value: -2 }, { answer: 'a', tools: ['x', 'y', 'z'] }), -2);
    assert.equal(score({ rule: 'steps-penalty', max: 4 }, { answer: 'a', tools: ['x', 'y', 'z'] }), 0);
    assert.equal(
      score(
        { rule: 'tokens-penalty', max: 100 },
        { answer: 'a', tools: ['x'], tokens: { prompt: 40, completion: 20 } },
      ),
      -1,
    );
    assert.equal(
      score(
        { rule: 'tokens-penalty', max: 120 },
        { answer: 'a', tools: ['x'], tokens: { prompt: 40, completion: 20 } },
      ),
      0,
    );
  });

  test('a regex that does not compile: a fixed one is refused as the config is read, an expected one names it', (t) => {
    assert.throws(() => RuleConfig.parse({ rule: 'regex', pattern: '(' }), /pattern is not a regular expression/);
    assert.throws(() => RuleConfig.parse({ rule: 'regex', pattern: 'a', flags: 'x' }), /flags may only use/);
    const store = openStore(t);
    const { trajectory, task } = view(store, { answer: 'a', task: { input: { expected: '(' } } });
    assert.throws(() => applyRule(RuleConfig.parse({ rule: 'regex' }), trajectory, task), /invalid pattern "\("/);
  });
});
