/**
 * The Gemini API seen as OpenAI chat completions (for everything that reads a call) and the translation back (for a
 * policy that answers a Gemini agent); llmApis.ts does the same for the Anthropic Messages API. Pure functions of
 * JSON.
 */
import type { Json, JsonObject } from './records';
import { isJsonObject, jsonList, jsonString } from './json';
import { chatContent, parseArguments } from './chatParts';

/**
 * The id of a model turn's `index`-th function call, the turn being the `turn`-th content of the
 * conversation: Gemini's own `id` when it sent one (Vertex, the Live API, a translated policy's
 * answer), else one derived from that position. Gemini sends no ids as a rule, and names repeat (two
 * `get_weather` calls in one turn): a position is unique in the conversation, and the same wherever
 * the turn is read — in the response that made it (turn = the request's content count) and in the
 * history of every later request.
 */
export function geminiCallId(call: JsonObject, turn: number, index: number): string {
  return jsonString(call.id) || `call_${turn}_${index}`;
}

/** The function calls of the latest model turn, each answered at most once. */
interface PendingCall {
  readonly id: string;
  readonly name: string;
  answered: boolean;
}

function geminiParts(content: Json | undefined): JsonObject[] {
  if (typeof content === 'string') return [{ text: content }];
  return jsonList(isJsonObject(content) ? content.parts : undefined).filter(isJsonObject);
}

/**
 * One content of a conversation as chat messages. A model turn's calls get their ids (geminiCallId)
 * and become the pending calls; a user (or `function`) turn's FunctionResponse parts answer them in
 * order — by id when the response has one that matches, else the first unanswered call of that name.
 */
function geminiContentToChat(content: JsonObject, turn: number, pending: PendingCall[]): JsonObject[] {
  const parts = jsonList(content.parts).filter(isJsonObject);
  if (content.role === 'model') {
    const text = parts
      .filter((p) => typeof p.text === 'string' && p.thought !== true)
      .map((p) => jsonString(p.text))
      .join('');
    const thinking = parts
      .filter((p) => p.thought === true)
      .map((p) => jsonString(p.text))
      .join('\n');
    const calls = parts
      .filter((p) => isJsonObject(p.functionCall))
      .map((p, index) => {
        const fn = p.functionCall as JsonObject;
        return {
          id: geminiCallId(fn, turn, index),
          type: 'function',
          function: { name: jsonString(fn.name), arguments: JSON.stringify(fn.args ?? {}) },
        };
      });
    pending.splice(
      0,
      pending.length,
      ...calls.map((call) => ({ id: call.id, name: call.function.name, answered: false })),
    );
    const chat: JsonObject = { role: 'assistant', content: text.length > 0 || calls.length === 0 ? text : null };
    if (thinking) chat.reasoning_content = thinking;
    if (calls.length > 0) chat.tool_calls = calls;
    return [chat];
  }
  const results = parts
    .filter((p) => isJsonObject(p.functionResponse))
    .map((p, index) => {
      const fn = p.functionResponse as JsonObject;
      const call =
        pending.find((c) => !c.answered && jsonString(fn.id) !== '' && c.id === jsonString(fn.id)) ??
        pending.find((c) => !c.answered && c.name === jsonString(fn.name));
      if (call) call.answered = true;
      // A response to no call of the previous turn keeps its own id, else one of its position.
      return {
        role: 'tool',
        tool_call_id: call?.id ?? (jsonString(fn.id) || `call_${turn}_${index}`),
        content: JSON.stringify(fn.response ?? {}),
      };
    });
  const chatParts = parts.flatMap((p): JsonObject[] => {
    if (typeof p.text === 'string') return [{ type: 'text', text: p.text }];
    if (isJsonObject(p.inlineData))
      return [
        {
          type: 'image_url',
          image_url: { url: `data:${jsonString(p.inlineData.mimeType)};base64,${jsonString(p.inlineData.data)}` },
        },
      ];
    if (isJsonObject(p.fileData)) return [{ type: 'image_url', image_url: { url: jsonString(p.fileData.fileUri) } }];
    return [];
  });
  return chatParts.length > 0 ? [...results, { role: 'user', content: chatContent(chatParts) }] : results;
}

/** A request's contents as Gemini reads them (a bare string is one user turn). */
export function geminiContents(request: JsonObject): JsonObject[] {
  return typeof request.contents === 'string'
    ? [{ role: 'user', parts: [{ text: request.contents }] }]
    : jsonList(request.contents).filter(isJsonObject);
}

/** A generateContent request (the model comes from the URL) as a chat completions request. */
export function geminiRequestToChat(request: JsonObject, model: string): JsonObject {
  const messages: JsonObject[] = [];
  const system = geminiParts(request.systemInstruction)
    .map((p) => jsonString(p.text))
    .join('\n');
  if (system) messages.push({ role: 'system', content: system });
  const pending: PendingCall[] = [];
  geminiContents(request).forEach((content, turn) => messages.push(...geminiContentToChat(content, turn, pending)));
  const chat: JsonObject = { model, messages };
  const declarations = jsonList(request.tools)
    .filter(isJsonObject)
    .flatMap((tool) => jsonList(tool.functionDeclarations).filter(isJsonObject));
  if (declarations.length > 0) {
    chat.tools = declarations.map((fn) => ({
      type: 'function',
      function: {
        name: jsonString(fn.name),
        description: jsonString(fn.description),
        parameters: fn.parametersJsonSchema ?? fn.parameters ?? { type: 'object', properties: {} },
      },
    }));
  }
  const config = isJsonObject(request.generationConfig) ? request.generationConfig : {};
  if (typeof config.maxOutputTokens === 'number') chat.max_tokens = config.maxOutputTokens;
  if (typeof config.temperature === 'number') chat.temperature = config.temperature;
  if (typeof config.topP === 'number') chat.top_p = config.topP;
  if (Array.isArray(config.stopSequences)) chat.stop = config.stopSequences;
  return chat;
}

const GEMINI_STOP: Record<string, string> = {
  STOP: 'stop',
  MAX_TOKENS: 'length',
  SAFETY: 'content_filter',
  RECITATION: 'content_filter',
};

/**
 * A generateContent response as a chat completion. `turn` is where the answer's turn stands in the
 * conversation (the request's content count), from which its function calls' ids are derived.
 */
export function geminiResponseToChat(response: JsonObject, turn = 0): JsonObject {
  const candidate = isJsonObject(jsonList(response.candidates)[0])
    ? (jsonList(response.candidates)[0] as JsonObject)
    : {};
  const [message] = geminiContentToChat(
    { role: 'model', parts: isJsonObject(candidate.content) ? (candidate.content.parts ?? []) : [] },
    turn,
    [],
  );
  const usage = isJsonObject(response.usageMetadata) ? response.usageMetadata : {};
  const input = typeof usage.promptTokenCount === 'number' ? usage.promptTokenCount : 0;
  const output =
    (typeof usage.candidatesTokenCount === 'number' ? usage.candidatesTokenCount : 0) +
    (typeof usage.thoughtsTokenCount === 'number' ? usage.thoughtsTokenCount : 0);
  const hasCalls = Array.isArray(message!.tool_calls);
  return {
    id: jsonString(response.responseId),
    object: 'chat.completion',
    model: jsonString(response.modelVersion),
    choices: [
      {
        index: 0,
        message: message!,
        finish_reason: hasCalls
          ? 'tool_calls'
          : (GEMINI_STOP[jsonString(candidate.finishReason)] ?? candidate.finishReason ?? null),
      },
    ],
    usage: { prompt_tokens: input, completion_tokens: output, total_tokens: input + output },
  };
}

/** A chat completion's finish_reason as Gemini's (the rest: STOP). */
const CHAT_STOP_TO_GEMINI: Record<string, string> = { length: 'MAX_TOKENS', content_filter: 'SAFETY' };

/** A chat completion as the generateContent response the agent asked for. */
export function chatToGeminiResponse(chat: JsonObject, model: string): JsonObject {
  const choice = isJsonObject(jsonList(chat.choices)[0]) ? (jsonList(chat.choices)[0] as JsonObject) : {};
  const message = isJsonObject(choice.message) ? choice.message : {};
  const parts: JsonObject[] = [];
  const reasoning = jsonString(message.reasoning_content ?? message.reasoning);
  if (reasoning) parts.push({ text: reasoning, thought: true });
  if (jsonString(message.content)) parts.push({ text: jsonString(message.content) });
  for (const call of jsonList(message.tool_calls).filter(isJsonObject)) {
    const fn = isJsonObject(call.function) ? call.function : {};
    parts.push({
      functionCall: {
        ...(jsonString(call.id) ? { id: jsonString(call.id) } : {}),
        name: jsonString(fn.name),
        args: parseArguments(jsonString(fn.arguments)),
      },
    });
  }
  const usage = isJsonObject(chat.usage) ? chat.usage : {};
  const input = typeof usage.prompt_tokens === 'number' ? usage.prompt_tokens : 0;
  const output = typeof usage.completion_tokens === 'number' ? usage.completion_tokens : 0;
  return {
    candidates: [
      {
        content: { role: 'model', parts },
        finishReason: CHAT_STOP_TO_GEMINI[jsonString(choice.finish_reason)] ?? 'STOP',
        index: 0,
      },
    ],
    usageMetadata: { promptTokenCount: input, candidatesTokenCount: output, totalTokenCount: input + output },
    modelVersion: model,
    responseId: jsonString(chat.id) || 'lightning',
  };
}
