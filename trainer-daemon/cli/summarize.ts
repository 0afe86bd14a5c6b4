/**
 * One-line summaries of a recorded LLM call for the terminal: what went in (the last message)
 * and what came out (tool calls with their arguments, or the text), across the chat completions,
 * Responses and legacy completions shapes. The full record stays in `show --json`.
 */
import { textOf, type Json, type JsonObject, type Span } from '../protocol';
import { truncate } from './textTable';
import { asJsonObject, jsonList } from '../protocol/json';

function text(value: Json | undefined): string {
  if (typeof value === 'string') return value;
  // Content parts: [{type:'text', text}] or Responses' [{type:'output_text', text}].
  return jsonList(value)
    .map((part) => textOf(asJsonObject(part)?.text))
    .join('');
}

function oneLine(value: string, max = 100): string {
  return truncate(value.replace(/\s+/g, ' ').trim(), max);
}

function lastInput(request: JsonObject): string | undefined {
  const messages = jsonList(request.messages ?? request.input);
  const last = asJsonObject(messages.at(-1));
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
  for (const item of jsonList(response.output)) {
    const entry = asJsonObject(item);
    if (entry?.type === 'function_call')
      lines.push(`tool call ${textOf(entry.name)}(${oneLine(textOf(entry.arguments), 80)})`);
    else if (entry?.type === 'message') lines.push(`"${oneLine(text(entry.content))}"`);
  }
  for (const choice of jsonList(response.choices)) {
    const message = asJsonObject(asJsonObject(choice)?.message);
    for (const call of jsonList(message?.tool_calls)) {
      const fn = asJsonObject(asJsonObject(call)?.function);
      lines.push(`tool call ${textOf(fn?.name)}(${oneLine(textOf(fn?.arguments), 80)})`);
    }
    const content = message ? text(message.content) : textOf(asJsonObject(choice)?.text);
    if (content) lines.push(`"${oneLine(content)}"`);
  }
  return lines;
}

export function summarizeLlmCall(span: Span): string[] {
  const request = asJsonObject(span.attributes['lightning.request']);
  const response = asJsonObject(span.attributes['lightning.response']);
  const lines: string[] = [];
  const input = request ? lastInput(request) : undefined;
  if (input) lines.push(`← ${input}`);
  if (response) lines.push(...outputs(response).map((line) => `→ ${line}`));
  return lines;
}
