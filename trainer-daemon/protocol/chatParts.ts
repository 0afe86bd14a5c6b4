/**
 * Pieces the Anthropic and Gemini readers (llmApis.ts, geminiApi.ts) share when they write chat completions.
 */
import type { Json, JsonObject } from './records';
import { isJsonObject, jsonString } from './json';

/** A tool call's JSON arguments as an object (`{}` when they are not a JSON object). */
export function parseArguments(text: string): JsonObject {
  try {
    const parsed = JSON.parse(text) as Json;
    return isJsonObject(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** A chat message's content: plain text when it is only text, else OpenAI content parts (images). */
export function chatContent(parts: JsonObject[]): Json {
  return parts.every((part) => part.type === 'text') ? parts.map((part) => jsonString(part.text)).join('\n') : parts;
}
