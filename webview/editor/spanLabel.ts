/**
 * A timeline row's name, pure: what the span did, as trace views name their rows — an LLM call by its model
 * and the first words of its answer (or the tools it called), a tool by its name and arguments — instead of
 * the span's own name (`chat gpt-4o-mini` on every call). Read from the recorded request and response
 * (conversation.ts) and the GenAI / OpenInference tool attributes; anything else keeps its span name.
 */
import type { Json, Span } from '../../trainer-daemon/protocol/records';
import { conversationOf } from './conversation';

/** How many characters of an answer or of arguments a row shows (the name column cuts the rest with …). */
const PREVIEW_CHARS = 60;

const oneLine = (text: string): string => text.replace(/\s+/g, ' ').trim();

/** The first words of a text, cut at a word boundary past `max` characters, with an ellipsis. */
export function firstWords(text: string, max = PREVIEW_CHARS): string {
  const line = oneLine(text);
  if (line.length <= max) return line;
  const cut = line.slice(0, max);
  const space = cut.lastIndexOf(' ');
  return `${(space > max / 2 ? cut.slice(0, space) : cut).replace(/[\s,.;:]+$/, '')}…`;
}

/** Tool arguments in one short line: a JSON object as `city: "Paris", units: "c"`, anything else as text. */
export function argumentsText(value: Json | undefined): string {
  if (value === undefined || value === null) return '';
  let parsed: Json = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value) as Json;
    } catch {
      return firstWords(value);
    }
  }
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
    return firstWords(
      Object.entries(parsed)
        .map(([key, item]) => `${key}: ${JSON.stringify(item)}`)
        .join(', '),
    );
  }
  return firstWords(typeof parsed === 'string' ? parsed : JSON.stringify(parsed));
}

const TOOL_NAME_KEYS = ['gen_ai.tool.name', 'tool.name'];
const TOOL_ARGUMENT_KEYS = ['gen_ai.tool.call.arguments', 'tool.arguments', 'input.value', 'input'];

function toolLabel(span: Span): string {
  const attributes = span.attributes;
  const named = TOOL_NAME_KEYS.map((key) => attributes[key]).find((value) => typeof value === 'string' && value !== '');
  // Span names such as `execute_tool get_weather` or `tool get_weather` carry the name after their verb.
  const name = typeof named === 'string' ? named : span.name.replace(/^(?:execute_tool|tool|function)[\s:]+/i, '');
  const args = argumentsText(TOOL_ARGUMENT_KEYS.map((key) => attributes[key]).find((value) => value !== undefined));
  return `${name}(${args})`;
}

function llmLabel(span: Span): string {
  const conversation = conversationOf(span);
  const model = conversation.model === 'unknown model' ? span.name : conversation.model;
  if (span.statusCode === 'error') return `${model} · ${firstWords(span.statusMessage ?? 'error')}`;
  const blocks = conversation.response.flatMap((turn) => turn.blocks);
  const calls = blocks.filter((block) => block.kind === 'toolCall');
  if (calls.length > 0)
    return `${model} → ${firstWords(calls.map((call) => `${call.name}(${argumentsText(call.arguments)})`).join(', '))}`;
  const answer = blocks.find((block) => block.kind === 'text' && block.text.trim() !== '');
  if (answer && answer.kind === 'text') return `${model} · “${firstWords(answer.text, 48)}”`;
  return span.endMs === null ? `${model} · answering…` : model;
}

const labels = new WeakMap<Span, string>();

/**
 * The row's name for a span (cached per span object: a 2,000-span rollout is laid out once per frame while it loads).
 */
export function spanLabel(span: Span): string {
  let label = labels.get(span);
  if (label === undefined) {
    label = span.category === 'llm' ? llmLabel(span) : span.category === 'tool' ? toolLabel(span) : span.name;
    labels.set(span, label);
  }
  return label;
}
