/**
 * The demo's model server: a small OpenAI-compatible chat-completions endpoint (JSON and SSE) that
 * plays a tool-using arithmetic assistant by rule — it has no weights and says so in its model id.
 * It exists so that `npm run demo` needs no API key, no GPU and no download; everything between it
 * and the agent (the proxy, the recording, the rewards) is the real product.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export const DEMO_MODEL_ID = 'lightning-demo-rules-v1';

type Message = { role: string; content?: string | null; tool_calls?: unknown[] };

/** Reads "What is 23 minus 45?" into a calculator expression. */
export function parseQuestion(text: string): { a: number; op: '+' | '-' | '*'; b: number } | undefined {
  const match = /(-?\d+)\s*(plus|minus|times|\+|-|\*|x)\s*(-?\d+)/i.exec(text);
  if (!match) return undefined;
  const word = match[2]!.toLowerCase();
  const op = word === 'plus' || word === '+' ? '+' : word === 'minus' || word === '-' ? '-' : '*';
  return { a: Number(match[1]), op, b: Number(match[3]) };
}

function reply(messages: Message[], hasTools: boolean): { content: string | null; toolCall?: { name: string; arguments: string } } {
  const last = messages.at(-1);
  if (last?.role === 'tool') return { content: `The answer is ${String(last.content).trim()}.` };
  const question = parseQuestion(String(messages.findLast((m) => m.role === 'user')?.content ?? ''));
  if (!question) return { content: 'I can only do arithmetic with two numbers.' };
  if (!hasTools) return { content: 'I need the calculate tool for that.' };
  return { content: null, toolCall: { name: 'calculate', arguments: JSON.stringify({ expression: `${question.a} ${question.op} ${question.b}` }) } };
}

export async function startDemoModel(): Promise<{ url: string; close(): Promise<void> }> {
  let counter = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (!req.url?.endsWith('/chat/completions')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `the demo model serves /v1/chat/completions only, not ${req.url}` } }));
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { messages?: Message[]; tools?: unknown[]; stream?: boolean };
      const out = reply(body.messages ?? [], (body.tools?.length ?? 0) > 0);
      counter += 1;
      const id = `chatcmpl-demo-${counter}`;
      const usage = { prompt_tokens: JSON.stringify(body.messages ?? []).length >> 2, completion_tokens: (out.content ?? out.toolCall?.arguments ?? '').length >> 2 };
      const toolCalls = out.toolCall ? [{ id: `call_${counter}`, type: 'function', function: out.toolCall }] : undefined;
      const finish = toolCalls ? 'tool_calls' : 'stop';
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model: DEMO_MODEL_ID, choices: [{ index: 0, finish_reason: finish, message: { role: 'assistant', content: out.content, ...(toolCalls ? { tool_calls: toolCalls } : {}) } }], usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const send = (delta: object, finishReason: string | null = null): void => void res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model: DEMO_MODEL_ID, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`);
      send({ role: 'assistant', content: out.content ?? null, ...(toolCalls ? { tool_calls: toolCalls.map((c, index) => ({ index, ...c })) } : {}) });
      send({}, finish);
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
