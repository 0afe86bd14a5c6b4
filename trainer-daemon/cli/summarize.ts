/**
 * One-line summaries of a recorded LLM call for the terminal: what went in (the last message)
 * and what came out (tool calls with their arguments, or the text), across the chat completions,
 * Responses and legacy completions shapes. The full record stays in `show --json`.
 */
import { textOf, type Json, type Span } from '../protocol';
import { truncate } from './format';

type JsonObject = { [key: string]: Json };

function obj(value: Json | undefined): JsonObject | undefined {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined;
}

function arr(value: Json | undefined): Json[] {
  return Array.isArray(value) ? value : [];
}

function text(value: Json | undefined): string {
  if (typeof value === 'string') return value;
  // Content parts: [{type:'text', text}] or Responses' [{type:'output_text', text}].
  return arr(value)
    .map((part) => textOf(obj(part)?.text))
    .join('');
}

function oneLine(value: string, max = 100): string {
  return truncate(value.replace(/\s+/g, ' ').trim(), max);
}

function lastInput(request: JsonObject): string | undefined {
  const messages = arr(request.messages ?? request.input);
  const last = obj(messages.at(-1));
  if (last) {
    if (last.type === 'function_call_output') return `tool result: ${oneLine(textOf(last.output))}`;
    return `${textOf(last.role, 'input')}: ${oneLine(text(last.content))}`;
  }
  if (typeof request.input === 'string') return `user: ${oneLine(request.input)}`;
  if (typeof request.prompt === 'string') return `prompt: ${oneLine(request.prompt)}`;
  return undefined;
}

function outputs(response: JsonObject): string[] {
  const lines: string[] = [];
  for (const item of arr(response.output)) {
    const entry = obj(item);
    if (entry?.type === 'function_call')
      lines.push(`tool call ${textOf(entry.name)}(${oneLine(textOf(entry.arguments), 80)})`);
    else if (entry?.type === 'message') lines.push(`"${oneLine(text(entry.content))}"`);
  }
  for (const choice of arr(response.choices)) {
    const message = obj(obj(choice)?.message);
    for (const call of arr(message?.tool_calls)) {
      const fn = obj(obj(call)?.function);
      lines.push(`tool call ${textOf(fn?.name)}(${oneLine(textOf(fn?.arguments), 80)})`);
    }
    const content = message ? text(message.content) : textOf(obj(choice)?.text);
    if (content) lines.push(`"${oneLine(content)}"`);
  }
  return lines;
}

export function summarizeLlmCall(span: Span): string[] {
  const request = obj(span.attributes['lightning.request']);
  const response = obj(span.attributes['lightning.response']);
  const lines: string[] = [];
  const input = request ? lastInput(request) : undefined;
  if (input) lines.push(`← ${input}`);
  if (response) lines.push(...outputs(response).map((line) => `→ ${line}`));
  return lines;
}
