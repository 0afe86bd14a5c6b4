/**
 * `lightning export --format chat` for every API shape the proxy records, with real SDK agents through
 * `lightning run` against the scripted upstream, read row by row: `@openai/agents` and `openai` on the
 * Responses API (instructions, input items, function calls and their outputs, `previous_response_id`),
 * legacy `functions` (JSON and streamed), an n=2 answer, and a call with no chat form, which the summary
 * names instead of leaving the file silently short.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../helpers/daemon';
import {
  answer,
  answerTool,
  askTool,
  assertLegacyFunctionsRun,
  assertToolRows,
  chatRows,
  question,
} from '../helpers/chatRows';
import { exportRows, llmOf } from '../helpers/outcomeChecks';
import { AGENTS } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import { ANSWER, REASONING, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';

type Obj = Record<string, unknown>;

let upstream: ScriptedUpstream;
before(async () => (upstream = await startScriptedUpstream()));
after(() => upstream.close());

describe('every API the proxy records exports chat rows', () => {
  for (const mode of ['responses', 'stream'] as const) {
    test(`@openai/agents on the Responses API (${mode === 'stream' ? 'streaming' : 'JSON'}): instructions, the tool call and its result, the answer`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-agents-agent.mjs'), mode]);
      assert.deepEqual(
        llmOf(run).map((span) => span.attributes['lightning.api']),
        ['responses', 'responses'],
      );
      const { rows, summary } = await chatRows(run);
      assertToolRows(rows, [{ role: 'system', content: 'Answer weather questions with the tool.' }], 'call_paris', [
        'get_weather',
      ]);
      const tool = (rows[0]!.tools as Array<{ type: string; function: Obj }>)[0]!;
      assert.deepEqual(
        [tool.type, tool.function.description, tool.function.strict, (tool.function.parameters as Obj).required],
        ['function', 'Current weather in a city', true, ['city']],
      );
      assert.deepEqual([summary.lines, summary.skippedNotChat, summary.notChat, summary.otherChoices], [2, 0, {}, 0]);

      // The agent posts no reward: by default its rollout is left out, and the empty file says so.
      const out = path.join(run.cwd, 'unrewarded.jsonl');
      const unrewarded = await runCli(['export', '--format', 'chat', '--out', out], { cwd: run.cwd });
      assert.equal(unrewarded.code, 0, unrewarded.stderr);
      assert.equal(fs.readFileSync(out, 'utf8'), '');
      assert.match(
        unrewarded.stderr,
        /no rows written: 1 rollout without an episode reward \(--missing-reward fill exports them\)/,
      );

      // Transitions carry the same chat view, and the Responses items as they went over the wire.
      const transitions = await exportRows(run, 'transitions');
      const second = transitions.rows[1]!;
      const prompt = second.prompt as { messages: Obj[]; input: Obj[] };
      assert.deepEqual(prompt.messages, (rows[1]!.messages as Obj[]).slice(0, -1));
      assert.deepEqual(
        prompt.input.map((item) => item.type ?? item.role),
        ['user', 'function_call', 'function_call_output'],
      );
      assert.deepEqual((second.response as { message: Obj }).message, answer);
      assert.equal((second.response as { output: Obj[] }).output[0]!.type, 'message');
    });
  }

  test("@openai/agents with a reasoning model: reasoning items are the turn's reasoning_content, not the row's reply", async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-agents-agent.mjs'), 'responses'], {
      AGENT_MODEL: 'reasoning-model',
    });
    // The SDK sends the first answer's reasoning item back with its function call.
    const history = (llmOf(run)[1]!.attributes['lightning.request'] as { input: Obj[] }).input;
    assert.deepEqual(
      history.map((item) => item.type ?? item.role),
      ['user', 'reasoning', 'function_call', 'function_call_output'],
    );
    const { rows } = await chatRows(run);
    const system = { role: 'system', content: 'Answer weather questions with the tool.' };
    assert.deepEqual(
      rows[0]!.messages,
      [system, question, askTool('call_paris')],
      'the reply: its text and tool calls',
    );
    assert.deepEqual(rows[1]!.messages, [
      system,
      question,
      { ...askTool('call_paris'), reasoning_content: REASONING },
      answerTool('call_paris'),
      answer,
    ]);
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual((transitions.rows[1]!.response as { message: Obj }).message, {
      ...answer,
      reasoning_content: REASONING,
    });
  });

  test('openai on the Responses API: input items, function_call / function_call_output pairs, the answer', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-agent.mjs'), 'responses']);
    const { rows } = await chatRows(run);
    assertToolRows(rows, [], 'call_paris', ['get_weather']);
  });

  test("openai on the Responses API, previous_response_id: the row holds the conversation it continues, with this call's instructions", async (t) => {
    const run = await runAgent(t, upstream.url, [
      'node',
      path.join(AGENTS, 'openai-shapes-agent.mjs'),
      'previous-response',
    ]);
    assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`));
    const second = llmOf(run)[1]!.attributes['lightning.request'] as {
      previous_response_id?: string;
      input: unknown[];
    };
    assert.match(second.previous_response_id ?? '', /^resp_/, 'the agent sent only the new item');
    assert.equal(second.input.length, 1);
    const { rows } = await chatRows(run);
    assert.equal(rows.length, 2);
    assert.deepEqual(rows[0]!.messages, [
      { role: 'system', content: 'Use the tool.' },
      question,
      askTool('call_paris'),
    ]);
    assert.deepEqual(rows[1]!.messages, [
      { role: 'system', content: 'Answer in one line.' },
      question,
      askTool('call_paris'),
      answerTool('call_paris'),
      answer,
    ]);
  });

  for (const mode of ['functions', 'functions-stream'] as const) {
    test(`openai with legacy functions (${mode === 'functions' ? 'JSON' : 'streamed'}): function_call carried as tool_calls, function results as tool messages`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-shapes-agent.mjs'), mode]);
      await assertLegacyFunctionsRun(run);
    });
  }

  test('an n=2 answer: its first choice is the row, and the summary says the second was left out', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-shapes-agent.mjs'), 'n2']);
    assert.match(run.stdout, /ANSWERS: It is sunny in Paris\. \| It is sunny in Paris\. \(choice 1\)/);
    const { rows, summary, stderr } = await chatRows(run);
    assert.equal(rows.length, 1);
    assert.deepEqual((rows[0]!.messages as Obj[]).at(-1), answer);
    assert.equal(summary.otherChoices, 1);
    assert.match(stderr, /1 other choice of n > 1 answers left out: one row per call, of its first choice/);
    const transitions = await exportRows(run, 'transitions');
    assert.equal(transitions.summary.otherChoices, 1);
    assert.match(transitions.stderr, /1 other choice of n > 1 answers left out/);
  });

  test('a call with no chat form (legacy /completions) is named in the summary, and an empty file says why', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'openai-shapes-agent.mjs'), 'completions']);
    assert.match(run.stdout, /ANSWER: 4/);
    const { rows, summary, stderr } = await chatRows(run);
    assert.equal(rows.length, 0);
    const why = 'a legacy /completions call: a text prompt, not chat messages';
    assert.deepEqual([summary.skippedNotChat, summary.notChat], [1, { [why]: 1 }]);
    assert.ok(stderr.includes(`no chat row for 1 call (${why})`), stderr);
    assert.match(stderr, /no rows written: no call has a chat form/);
    // The transitions format still has the call (its prompt text and answer), and says why it has no messages.
    const transitions = await exportRows(run, 'transitions');
    assert.deepEqual(
      transitions.rows.map((row) => [(row.prompt as Obj).input, (row.response as Obj).text, row.notChat]),
      [['2 + 2 =', ' 4', why]],
    );
  });
});
