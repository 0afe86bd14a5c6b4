/**
 * Rated rollouts to fine-tune on (`lightning train --algorithm sft`), recorded as a user records them: a small agent
 * run by `lightning dataset run` against the scripted upstream, each task twice — once answered well (the agent
 * rates it 1, as Good in the panel) and once badly (0) — some of them through a tool call and its result. The
 * upstream (a "teacher") answers by the request's `user` field, which the chat rows do not carry.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { runCli } from './daemon';
import { startScriptedUpstream, type ScriptedUpstream } from './scriptedUpstream';

export interface RatedTask {
  readonly id: string;
  readonly question: string;
  /** The teacher's answer when the rollout is the good one, and when it is the bad one. */
  readonly good: string;
  readonly bad: string;
  /** Offer the get_weather tool: the teacher calls it first (get_weather(Paris)), then answers. */
  readonly tool?: boolean;
}

export const RATED_TASKS: readonly RatedTask[] = [
  { id: 'sum', question: '2+3?', good: '5', bad: '7' },
  { id: 'capital', question: 'capital of France?', good: 'Paris', bad: 'Rome' },
  { id: 'sky', question: 'sky colour?', good: 'blue', bad: 'green' },
  { id: 'weather', question: 'weather in Paris?', good: 'sunny', bad: 'rainy', tool: true },
  { id: 'umbrella', question: 'umbrella in Paris?', good: 'no', bad: 'yes', tool: true },
];

/** The tool the weather tasks offer (as the scripted upstream's default tool call expects it). */
export const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

const AGENT = `
const task = JSON.parse(process.env.LIGHTNING_TASK);
const tools = task.tool ? [${JSON.stringify(WEATHER_TOOL)}] : undefined;
const messages = [{ role: 'user', content: task.question }];
for (let turn = 0; turn < 3; turn += 1) {
  const res = await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer test' },
    body: JSON.stringify({ model: 'teacher', messages, user: task.good ? 'good' : 'bad', ...(tools ? { tools } : {}) }),
  });
  if (!res.ok) throw new Error('chat: ' + res.status + ' ' + (await res.text()));
  const message = (await res.json()).choices[0].message;
  messages.push(message);
  if (!message.tool_calls?.length) break;
  for (const call of message.tool_calls) messages.push({ role: 'tool', tool_call_id: call.id, content: 'sunny' });
}
const rated = await fetch(process.env.LIGHTNING_URL + '/reward', {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ value: task.good ? 1 : 0 }),
});
if (!rated.ok) throw new Error('reward: ' + rated.status);
`;

/** The teacher: a task's good or bad answer by the request's `user`; the tool call first where tools are offered. */
export function startTeacher(): Promise<ScriptedUpstream> {
  return startScriptedUpstream({
    chat: (body) => {
      const messages = body.messages as Array<{ role: string; content: unknown }>;
      if (body.tools && messages.at(-1)?.role !== 'tool') return undefined;
      const question = messages.find((m) => m.role === 'user')?.content;
      const task = RATED_TASKS.find((t) => t.question === question);
      assert.ok(task, `the teacher knows ${String(question)}`);
      return body.user === 'good' ? task.good : task.bad;
    },
  });
}

/**
 * Records every task twice in `cwd`'s store (dataset `rated`): a good rollout rated 1 and a bad one rated 0.
 * Returns how many rollouts were recorded.
 */
export async function recordRatedRollouts(cwd: string, upstream: ScriptedUpstream): Promise<number> {
  fs.writeFileSync(path.join(cwd, 'agent.mjs'), AGENT);
  const tasks = RATED_TASKS.flatMap((task) => [
    { id: `${task.id}-good`, question: task.question, tool: task.tool ?? false, good: true },
    { id: `${task.id}-bad`, question: task.question, tool: task.tool ?? false, good: false },
  ]);
  fs.writeFileSync(path.join(cwd, 'rated.jsonl'), tasks.map((task) => JSON.stringify(task)).join('\n'));
  const env = { LIGHTNING_UPSTREAM_URL: upstream.url, OPENAI_BASE_URL: '', OPENAI_API_BASE: '' };
  const imported = await runCli(['dataset', 'import', 'rated.jsonl'], { cwd, env });
  assert.equal(imported.code, 0, imported.stderr);
  const ran = await runCli(['dataset', 'run', 'rated', '--concurrency', '4', '--', process.execPath, 'agent.mjs'], {
    cwd,
    env,
  });
  assert.equal(ran.code, 0, ran.stdout + ran.stderr);
  return tasks.length;
}
