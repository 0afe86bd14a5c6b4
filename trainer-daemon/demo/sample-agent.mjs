// The demo's sample agent: an ordinary tool-using agent on the `openai` SDK. It knows nothing
// about Lightning — it reads OPENAI_BASE_URL/OPENAI_API_KEY like any OpenAI program, and its task
// from LIGHTNING_TASK; at the end it posts a reward (1 if its answer is right) to LIGHTNING_URL.
import OpenAI from 'openai';

const task = JSON.parse(process.env.LIGHTNING_TASK ?? '{"question":"What is 2 plus 2?","answer":4}');
const client = new OpenAI({ maxRetries: 0 });
const tools = [{
  type: 'function',
  function: {
    name: 'calculate',
    description: 'Evaluate an integer expression: a op b, with op one of + - *',
    parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
  },
}];

function calculate({ expression }) {
  const match = /^(-?\d+) ([+*-]) (-?\d+)$/.exec(expression.trim());
  if (!match) return 'error: expected "a op b"';
  const [a, op, b] = [Number(match[1]), match[2], Number(match[3])];
  return String(op === '+' ? a + b : op === '-' ? a - b : a * b);
}

const messages = [
  { role: 'system', content: 'You are a careful assistant. Use the calculate tool for arithmetic.' },
  { role: 'user', content: task.question },
];
let answer = '';
for (let turn = 0; turn < 4 && !answer; turn += 1) {
  const completion = await client.chat.completions.create({ model: process.env.AGENT_MODEL ?? 'demo', messages, tools });
  const message = completion.choices[0].message;
  messages.push(message);
  if (!message.tool_calls?.length) answer = message.content ?? '';
  for (const call of message.tool_calls ?? []) {
    messages.push({ role: 'tool', tool_call_id: call.id, content: calculate(JSON.parse(call.function.arguments)) });
  }
}
const correct = answer.includes(String(task.answer));
console.log(`${task.question} → ${answer} ${correct ? '(right)' : '(wrong)'}`);
if (process.env.LIGHTNING_URL) {
  await fetch(`${process.env.LIGHTNING_URL}/reward`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value: correct ? 1 : 0, comment: `expected ${task.answer}` }),
  });
}
