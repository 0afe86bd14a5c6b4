// The demo's sample agent: an ordinary tool-using agent on the `openai` SDK. Its task is arithmetic in
// words ("23 minus 45"); it has three tools — add, subtract, multiply (a, b) — and must pick the right
// one, then answer with the tool's result. It knows nothing about training: it reads OPENAI_BASE_URL /
// OPENAI_API_KEY like any OpenAI program, takes its task from LIGHTNING_TASK, and posts a reward
// (1 if its answer is right) to LIGHTNING_URL.
//
// Worker mode (docs/datasets.md, "Worker mode"): started with LIGHTNING_RUNNER_URL, it stays alive and loops
// `POST $LIGHTNING_RUNNER_URL/next` → {rolloutId, url, task}, running LIGHTNING_RUNNER_CONCURRENCY
// rollouts at once, each with `url + "/v1"` as its OpenAI base URL, until the batch is done (204).
import OpenAI from 'openai';

const OPERATIONS = { add: (a, b) => a + b, subtract: (a, b) => a - b, multiply: (a, b) => a * b };
const tools = Object.keys(OPERATIONS).map((name) => ({
  type: 'function',
  function: {
    name,
    description: `${name} two integers`,
    parameters: {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' } },
      required: ['a', 'b'],
    },
  },
}));

function runTool(call) {
  const operation = OPERATIONS[call.function.name];
  if (!operation) return `error: no tool ${call.function.name}`;
  try {
    const { a, b } = JSON.parse(call.function.arguments);
    return String(operation(Number(a), Number(b)));
  } catch {
    return 'error: arguments must be {"a": integer, "b": integer}';
  }
}

/** One episode: the model calls a tool, sees its result, answers; right when the answer is the expected number. */
async function solve(client, task) {
  const messages = [
    { role: 'system', content: 'Use exactly one of the tools, then reply with its result as a number.' },
    { role: 'user', content: task.question },
  ];
  let answer = null;
  for (let turn = 0; turn < 3 && answer === null; turn += 1) {
    const completion = await client.chat.completions.create({
      model: process.env.AGENT_MODEL ?? 'policy',
      messages,
      tools,
      max_tokens: 24,
    });
    const message = completion.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) answer = message.content ?? '';
    for (const call of message.tool_calls ?? [])
      messages.push({ role: 'tool', tool_call_id: call.id, content: runTool(call) });
  }
  const value = Number(/-?\d+/.exec(answer ?? '')?.[0]);
  return { answer, correct: value === task.answer };
}

async function post(url, body) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`POST ${url}: HTTP ${response.status} ${await response.text()}`);
}

async function work(runnerUrl) {
  for (;;) {
    const next = await fetch(`${runnerUrl}/next`, { method: 'POST' });
    if (next.status === 204) return;
    if (!next.ok) throw new Error(`POST ${runnerUrl}/next: HTTP ${next.status} ${await next.text()}`);
    const { url, task } = await next.json();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: process.env.OPENAI_API_KEY || 'unused', maxRetries: 0 });
    try {
      const { answer, correct } = await solve(client, task);
      await post(`${url}/reward`, {
        value: correct ? 1 : 0,
        comment: `answered ${JSON.stringify(answer)}, expected ${task.answer}`,
      });
      await post(`${url}/finish`, { status: 'succeeded' });
    } catch (error) {
      await post(`${url}/finish`, { status: 'failed', error: String(error?.message ?? error) }).catch(() => undefined);
    }
  }
}

if (process.env.LIGHTNING_RUNNER_URL) {
  const concurrency = Math.max(1, Number(process.env.LIGHTNING_RUNNER_CONCURRENCY ?? 1));
  await Promise.all(Array.from({ length: concurrency }, () => work(process.env.LIGHTNING_RUNNER_URL)));
} else {
  const task = JSON.parse(process.env.LIGHTNING_TASK ?? '{"question":"23 minus 45","answer":-22}');
  const { answer, correct } = await solve(new OpenAI({ maxRetries: 0 }), task);
  console.log(`${task.question} → ${answer} ${correct ? '(right)' : '(wrong)'}`);
  if (process.env.LIGHTNING_URL) {
    await post(`${process.env.LIGHTNING_URL}/reward`, { value: correct ? 1 : 0, comment: `expected ${task.answer}` });
  }
}
