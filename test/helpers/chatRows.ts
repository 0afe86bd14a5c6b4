/**
 * What `lightning export --format chat` must hold for the scripted upstream's weather conversation (a tool call, its
 * result, the answer), and the checks of an agent on legacy `functions` (chatExport.test.ts, chatExportPython.test.ts).
 */
import assert from 'node:assert/strict';
import { exportRows, llmOf } from './outcomeChecks';
import type { AgentRun } from './runAgent';
import { ANSWER } from './scriptedUpstream';

type Obj = Record<string, unknown>;

export const weatherArguments = '{"city":"Paris"}';
const toolResult = 'Paris: sunny, 24°C';
export const question = { role: 'user', content: 'What is the weather in Paris?' };
export const askTool = (id: string): Obj => ({
  role: 'assistant',
  content: null,
  tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: weatherArguments } }],
});
export const answerTool = (id: string): Obj => ({ role: 'tool', tool_call_id: id, content: toolResult });
export const answer = { role: 'assistant', content: ANSWER };

export async function chatRows(run: AgentRun): Promise<{ rows: Obj[]; summary: Obj; stderr: string }> {
  assert.equal(run.code, 0, run.stdout + run.stderr);
  return exportRows(run, 'chat');
}

/** The two rows of a tool-using agent: the call that asked for the tool, the call that answered with its result. */
export function assertToolRows(rows: Obj[], prefix: Obj[], id: string, toolNames: string[]): void {
  assert.equal(rows.length, 2, JSON.stringify(rows));
  assert.deepEqual(rows[0]!.messages, [...prefix, question, askTool(id)]);
  assert.deepEqual(rows[1]!.messages, [...prefix, question, askTool(id), answerTool(id), answer]);
  for (const row of rows)
    assert.deepEqual(
      (row.tools as Array<{ function: { name: string } }>).map((tool) => tool.function.name),
      toolNames,
    );
}

/**
 * An agent on legacy `functions` (JSON or streamed): the record keeps the function_call as sent (a stream's
 * reassembled), and the chat export carries it as tool_calls, the function's result as a tool message.
 */
export async function assertLegacyFunctionsRun(run: AgentRun): Promise<void> {
  assert.match(run.stdout, new RegExp(`ANSWER: ${ANSWER}`), run.stdout + run.stderr);
  const [first, second] = llmOf(run);
  const recorded = (
    first!.attributes['lightning.response'] as { choices: Array<{ message: Obj; finish_reason: string }> }
  ).choices[0]!;
  assert.deepEqual(
    [recorded.message.function_call, recorded.finish_reason],
    [{ name: 'get_weather', arguments: weatherArguments }, 'function_call'],
  );
  assert.equal((second!.attributes['lightning.request'] as { messages: Obj[] }).messages.at(-1)!.role, 'function');
  const { rows } = await chatRows(run);
  // The call's id is its position in the conversation (legacy calls have none): the same in the reply that
  // made it and in the history after it.
  assertToolRows(rows, [{ role: 'system', content: 'Answer weather questions with the function.' }], 'call_2', [
    'get_weather',
  ]);
  assert.deepEqual((rows[0]!.tools as Obj[])[0], {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  });
}
