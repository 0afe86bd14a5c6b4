/**
 * Gemini sends function calls without ids, and one turn may call the same function twice: the real
 * `@google/genai` SDK against the scripted upstream (`gemini-parallel`: `get_weather` for Paris and
 * Oslo in one turn). Each call gets a unique id by its position in the conversation, the same in the
 * record of the answer, in the next request's history and in both exports; the agent's
 * FunctionResponse parts are paired with the calls by order and name — and under `--token-ids`, the
 * chat completions the policy is sent pair each tool result with the id of its own call.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { asChatCall } from '../../trainer-daemon/protocol';
import { runCli } from '../helpers/daemon';
import { AGENTS, geminiEnv, llmOf, type Obj } from '../helpers/providerAgents';
import { runAgent, type AgentRun } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const AGENT = path.join(AGENTS, 'gemini-agent.mjs');

async function exportRows(run: AgentRun, format: 'transitions' | 'chat'): Promise<Obj[]> {
  const out = path.join(run.cwd, `${format}.jsonl`);
  const result = await runCli(['export', '--format', format, '--missing-reward', 'fill', '--out', out], {
    cwd: run.cwd,
  });
  assert.equal(result.code, 0, result.stderr);
  return fs
    .readFileSync(out, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Obj);
}

const callIds = (message: Obj): unknown[] => ((message.tool_calls ?? []) as Obj[]).map((call) => call.id);
const toolAnswers = (messages: Obj[]): unknown[][] =>
  messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content]);
const PARIS = '{"result":"Paris: sunny, 24°C"}';
const OSLO = '{"result":"Oslo: sunny, 24°C"}';

/** Record, history and both exports agree on the calls' ids, and each tool result is paired with its own call. */
async function assertPaired(run: AgentRun, ids: [string, string]): Promise<void> {
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.match(run.stdout, /ANSWER: It is sunny in Paris\./);
  const [first, second] = llmOf(run).sort((a, b) => a.sequence - b.sequence);
  const answer = asChatCall(first!.attributes).response!;
  const message = (answer.choices as Obj[])[0]!.message as Obj;
  assert.deepEqual(callIds(message), ids, 'two calls of one function: two ids');
  assert.deepEqual(
    (message.tool_calls as Obj[]).map((call) => (call.function as Obj).arguments),
    ['{"city":"Paris"}', '{"city":"Oslo"}'],
  );
  const history = asChatCall(second!.attributes).request!.messages as Obj[];
  assert.deepEqual(
    callIds(history.find((m) => m.role === 'assistant')!),
    ids,
    'the history reads the ids the answer had',
  );
  assert.deepEqual(toolAnswers(history), [
    [ids[0], PARIS],
    [ids[1], OSLO],
  ]);

  const chat = await exportRows(run, 'chat');
  assert.equal(chat.length, 2);
  const [firstRow, secondRow] = chat.map((row) => row.messages as Obj[]);
  assert.deepEqual(callIds(firstRow!.at(-1)!), ids, 'chat export: the reply’s calls');
  assert.deepEqual(
    callIds(secondRow!.find((m) => m.role === 'assistant' && m.tool_calls)!),
    ids,
    'chat export: the history’s calls',
  );
  assert.deepEqual(toolAnswers(secondRow!), [
    [ids[0], PARIS],
    [ids[1], OSLO],
  ]);
  const transitions = await exportRows(run, 'transitions');
  assert.deepEqual(callIds((transitions[0]!.response as Obj).message as Obj), ids, 'transitions: the reply’s calls');
  assert.deepEqual(toolAnswers((transitions[1]!.prompt as Obj).messages as Obj[]), [
    [ids[0], PARIS],
    [ids[1], OSLO],
  ]);
}

describe('Gemini: one function called twice in a turn', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`@google/genai (${mode}) against the Gemini API: ids by position, responses paired by order and name`, async (t) => {
      const run = await runAgent(t, upstream.url, ['node', AGENT, mode], {
        ...geminiEnv(upstream),
        AGENT_MODEL: 'gemini-parallel',
      });
      const [first] = llmOf(run).sort((a, b) => a.sequence - b.sequence);
      const parts = (((first!.attributes['lightning.response'] as Obj).candidates as Obj[])[0]!.content as Obj)
        .parts as Obj[];
      assert.deepEqual(
        parts,
        [
          { functionCall: { name: 'get_weather', args: { city: 'Paris' } } },
          { functionCall: { name: 'get_weather', args: { city: 'Oslo' } } },
        ],
        'the record is the answer as sent: no ids added',
      );
      // The answer is the conversation's second turn (index 1): its calls are call_1_0 and call_1_1.
      await assertPaired(run, ['call_1_0', 'call_1_1']);
    });
  }

  test('@google/genai under --token-ids: the policy’s ids reach the agent, and its tool results are paired with them', async (t) => {
    const seen = upstream.requests.length;
    const run = await runAgent(
      t,
      upstream.url,
      ['node', AGENT, 'json'],
      { GOOGLE_GEMINI_BASE_URL: '', GEMINI_API_KEY: '', AGENT_MODEL: 'gemini-parallel' },
      ['--token-ids'],
    );
    await assertPaired(run, ['call_paris', 'call_oslo']);
    const sent = upstream.requests.slice(seen).filter((r) => r.path === '/v1/chat/completions');
    assert.equal(sent.length, 2);
    const messages = sent[1]!.body!.messages as Obj[];
    assert.deepEqual(callIds(messages.find((m) => m.role === 'assistant')!), ['call_paris', 'call_oslo']);
    assert.deepEqual(
      toolAnswers(messages),
      [
        ['call_paris', PARIS],
        ['call_oslo', OSLO],
      ],
      'what the policy is sent (and trained on) pairs each result with its own call',
    );
  });
});
