/**
 * The checks of a Gemini agent whose model called one function twice in a turn (`gemini-parallel`: `get_weather`
 * for Paris and Oslo): the record of the answer, the next request's history and both exports agree on the calls'
 * ids, and each tool result is paired with its own call (geminiToolIds.test.ts, providersPythonGemini.test.ts).
 */
import assert from 'node:assert/strict';
import { asChatCall } from '../../trainer-daemon/protocol';
import { exportRows } from './outcomeChecks';
import { llmOf, type Obj } from './providerAgents';
import type { AgentRun } from './runAgent';

export const callIds = (message: Obj): unknown[] => ((message.tool_calls ?? []) as Obj[]).map((call) => call.id);
export const toolAnswers = (messages: Obj[]): unknown[][] =>
  messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content]);
/** The tool results as @google/genai and google-genai agents send them (`{"result": …}`). */
export const RESULTS: readonly [string, string] = ['{"result":"Paris: sunny, 24°C"}', '{"result":"Oslo: sunny, 24°C"}'];

export interface PairedIds {
  /** The ids of the answer's two calls, in its record and its chat row. */
  readonly answer: readonly [string, string];
  /** The ids the next request's history gives those calls: the answer's unless the agent sent ids of its own. */
  readonly history?: readonly [string, string];
  /** The two tool results, as the chat view reads the agent's functionResponse parts. */
  readonly results?: readonly [string, string];
}

/** Record, history and both exports agree on the calls' ids, and each tool result is paired with its own call. */
export async function assertPaired(run: AgentRun, expected: PairedIds): Promise<void> {
  const answerIds = [...expected.answer];
  const historyIds = [...(expected.history ?? expected.answer)];
  const [paris, oslo] = expected.results ?? RESULTS;
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.match(run.stdout, /ANSWER: It is sunny in Paris\./);
  const [first, second] = llmOf(run).sort((a, b) => a.sequence - b.sequence);
  const answer = asChatCall(first!.attributes).response!;
  const message = (answer.choices as Obj[])[0]!.message as Obj;
  assert.deepEqual(callIds(message), answerIds, 'two calls of one function: two ids');
  assert.deepEqual(
    (message.tool_calls as Obj[]).map((call) => (call.function as Obj).arguments),
    ['{"city":"Paris"}', '{"city":"Oslo"}'],
  );
  const history = asChatCall(second!.attributes).request!.messages as Obj[];
  assert.deepEqual(callIds(history.find((m) => m.role === 'assistant')!), historyIds, 'the history’s calls');
  assert.deepEqual(toolAnswers(history), [
    [historyIds[0], paris],
    [historyIds[1], oslo],
  ]);

  const chat = (await exportRows(run, 'chat')).rows;
  assert.equal(chat.length, 2);
  const [firstRow, secondRow] = chat.map((row) => row.messages as Obj[]);
  assert.deepEqual(callIds(firstRow!.at(-1)!), answerIds, 'chat export: the reply’s calls');
  assert.deepEqual(
    callIds(secondRow!.find((m) => m.role === 'assistant' && m.tool_calls)!),
    historyIds,
    'chat export: the history’s calls',
  );
  assert.deepEqual(toolAnswers(secondRow!), [
    [historyIds[0], paris],
    [historyIds[1], oslo],
  ]);
  const transitions = (await exportRows(run, 'transitions')).rows;
  assert.deepEqual(
    callIds((transitions[0]!.response as Obj).message as Obj),
    answerIds,
    'transitions: the reply’s calls',
  );
  assert.deepEqual(toolAnswers((transitions[1]!.prompt as Obj).messages as Obj[]), [
    [historyIds[0], paris],
    [historyIds[1], oslo],
  ]);
}
