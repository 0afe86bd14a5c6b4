/**
 * The LLM APIs the proxy captures besides OpenAI's — the Anthropic Messages API here, the Gemini API in
 * geminiApi.ts — seen as OpenAI chat completions: one shape for everything that reads a call (the panel, LightningRL,
 * `lightning export --format chat`, asChatCall below), and the translation the proxy applies when a checkpoint or the
 * trainer's policy (chat completions only) answers an Anthropic or Gemini agent. Pure functions of JSON; nothing here
 * imports the rest of the daemon.
 */
import type { Json, JsonObject } from './records';
import { isJsonObject, jsonList, jsonString } from './json';
import { chatContent, parseArguments } from './chatParts';
import { geminiContents, geminiRequestToChat, geminiResponseToChat } from './geminiApi';

/** `lightning.api` of a call recorded on the Messages API / the Gemini API. */
export const ANTHROPIC_MESSAGES = 'anthropic.messages';
export const GEMINI_GENERATE = 'gemini.generate_content';

// ---------------------------------------------------------------------------------------------
// Anthropic Messages API

function anthropicText(content: Json | undefined): string {
  if (typeof content === 'string') return content;
  return jsonList(content)
    .filter(isJsonObject)
    .map((block) => (block.type === 'text' ? jsonString(block.text) : JSON.stringify(block)))
    .join('\n');
}

function anthropicImage(block: JsonObject): JsonObject {
  const source = isJsonObject(block.source) ? block.source : {};
  const url =
    source.type === 'base64'
      ? `data:${jsonString(source.media_type)};base64,${jsonString(source.data)}`
      : jsonString(source.url);
  return { type: 'image_url', image_url: { url } };
}

function anthropicMessageToChat(message: JsonObject): JsonObject[] {
  const role = message.role === 'assistant' ? 'assistant' : 'user';
  if (typeof message.content === 'string') return [{ role, content: message.content }];
  const blocks = jsonList(message.content).filter(isJsonObject);
  if (role === 'assistant') {
    const text = blocks
      .filter((b) => b.type === 'text')
      .map((b) => jsonString(b.text))
      .join('');
    const thinking = blocks
      .filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking')
      .map((b) => (b.type === 'thinking' ? jsonString(b.thinking) : '[redacted thinking]'))
      .join('\n');
    const calls = blocks
      .filter((b) => b.type === 'tool_use' || b.type === 'server_tool_use')
      .map((b) => ({
        id: jsonString(b.id),
        type: 'function',
        function: { name: jsonString(b.name), arguments: JSON.stringify(b.input ?? {}) },
      }));
    const chat: JsonObject = { role, content: text.length > 0 || calls.length === 0 ? text : null };
    if (thinking) chat.reasoning_content = thinking;
    if (calls.length > 0) chat.tool_calls = calls;
    return [chat];
  }
  // Tool results answer the previous assistant turn's calls: they come first, as `tool` messages.
  const results = blocks
    .filter((b) => b.type === 'tool_result')
    .map((b) => ({ role: 'tool', tool_call_id: jsonString(b.tool_use_id), content: anthropicText(b.content) }));
  const parts = blocks.flatMap((b): JsonObject[] =>
    b.type === 'text'
      ? [{ type: 'text', text: jsonString(b.text) }]
      : b.type === 'image'
        ? [anthropicImage(b)]
        : b.type === 'tool_result'
          ? []
          : [{ type: 'text', text: JSON.stringify(b) }],
  );
  return parts.length > 0 ? [...results, { role, content: chatContent(parts) }] : results;
}

/**
 * Why a Messages request has no faithful chat form, or null: chat tool results are text (an image or a document in
 * one would become JSON text), a user turn's document or search result blocks have no chat part, and a request that
 * ends with an assistant turn (a prefill) is answered by continuing that turn, where a chat example starts a new one.
 */
export function anthropicChatIssue(request: JsonObject): string | null {
  const messages = jsonList(request.messages).filter(isJsonObject);
  for (const message of messages) {
    if (message.role === 'assistant' || typeof message.content === 'string') continue;
    for (const block of jsonList(message.content).filter(isJsonObject)) {
      if (block.type === 'tool_result') {
        if (typeof block.content === 'string') continue;
        const kinds = jsonList(block.content)
          .filter(isJsonObject)
          .filter((part) => part.type !== 'text');
        if (kinds.length > 0)
          return `an Anthropic tool result with ${jsonString(kinds[0]!.type)} content has no chat form (chat tool results are text)`;
      } else if (block.type !== 'text' && block.type !== 'image')
        return `an Anthropic ${jsonString(block.type)} block has no chat form (chat messages hold text and images)`;
    }
  }
  if (messages.at(-1)?.role === 'assistant')
    return 'an assistant prefill: the reply continues the turn the request ends with, where a chat example starts a new turn';
  return null;
}

function anthropicToolChoice(choice: Json | undefined): Json | undefined {
  if (!isJsonObject(choice)) return undefined;
  if (choice.type === 'any') return 'required';
  if (choice.type === 'tool') return { type: 'function', function: { name: jsonString(choice.name) } };
  return choice.type === 'none' ? 'none' : 'auto';
}

/** A Messages API request as a chat completions request (system, tool use and results, images, sampling). */
export function anthropicRequestToChat(request: JsonObject): JsonObject {
  const messages: JsonObject[] = [];
  const system = typeof request.system === 'string' ? request.system : anthropicText(request.system);
  if (system) messages.push({ role: 'system', content: system });
  for (const message of jsonList(request.messages).filter(isJsonObject))
    messages.push(...anthropicMessageToChat(message));
  const chat: JsonObject = { model: jsonString(request.model), messages };
  const tools = jsonList(request.tools).filter(
    (tool) => isJsonObject(tool) && isJsonObject(tool.input_schema),
  ) as JsonObject[];
  if (tools.length > 0)
    chat.tools = tools.map((tool) => ({
      type: 'function',
      function: {
        name: jsonString(tool.name),
        description: jsonString(tool.description),
        parameters: tool.input_schema!,
      },
    }));
  const toolChoice = anthropicToolChoice(request.tool_choice);
  if (toolChoice !== undefined && tools.length > 0) chat.tool_choice = toolChoice;
  if (typeof request.max_tokens === 'number') chat.max_tokens = request.max_tokens;
  for (const key of ['temperature', 'top_p'] as const) if (typeof request[key] === 'number') chat[key] = request[key];
  if (Array.isArray(request.stop_sequences)) chat.stop = request.stop_sequences;
  return chat;
}

const ANTHROPIC_STOP: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  pause_turn: 'stop',
  refusal: 'content_filter',
};
const CHAT_STOP_TO_ANTHROPIC: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};

/** A Messages API response as a chat completion (thinking as `reasoning_content`, tool_use as tool calls). */
export function anthropicResponseToChat(response: JsonObject): JsonObject {
  const [message] = anthropicMessageToChat({ role: 'assistant', content: response.content ?? [] });
  const usage = isJsonObject(response.usage) ? response.usage : {};
  const input = ['input_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'].reduce(
    (sum, key) => sum + (typeof usage[key] === 'number' ? usage[key] : 0),
    0,
  );
  const output = typeof usage.output_tokens === 'number' ? usage.output_tokens : 0;
  return {
    id: jsonString(response.id),
    object: 'chat.completion',
    model: jsonString(response.model),
    choices: [
      {
        index: 0,
        message: message!,
        finish_reason: ANTHROPIC_STOP[jsonString(response.stop_reason)] ?? response.stop_reason ?? null,
      },
    ],
    usage: { prompt_tokens: input, completion_tokens: output, total_tokens: input + output },
  };
}

/** A chat completion as the Messages API response the agent asked for. */
export function chatToAnthropicResponse(chat: JsonObject, model: string): JsonObject {
  const choice = isJsonObject(jsonList(chat.choices)[0]) ? (jsonList(chat.choices)[0] as JsonObject) : {};
  const message = isJsonObject(choice.message) ? choice.message : {};
  const content: JsonObject[] = [];
  const reasoning = jsonString(message.reasoning_content ?? message.reasoning);
  if (reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: '' });
  if (jsonString(message.content)) content.push({ type: 'text', text: jsonString(message.content) });
  for (const call of jsonList(message.tool_calls).filter(isJsonObject)) {
    const fn = isJsonObject(call.function) ? call.function : {};
    content.push({
      type: 'tool_use',
      id: jsonString(call.id) || `toolu_${content.length}`,
      name: jsonString(fn.name),
      input: parseArguments(jsonString(fn.arguments)),
    });
  }
  const usage = isJsonObject(chat.usage) ? chat.usage : {};
  // The stop sequence that ended the answer, where the server names it (`stop_reason`: vLLM, the policy server).
  const matched = typeof choice.stop_reason === 'string' ? choice.stop_reason : null;
  // An answer cut at max_tokens says so also when a tool call parsed from it, as Anthropic's API does: it is not a
  // whole call for the agent to run.
  const stop =
    choice.finish_reason !== 'length' && content.some((block) => block.type === 'tool_use')
      ? 'tool_use'
      : (CHAT_STOP_TO_ANTHROPIC[jsonString(choice.finish_reason)] ?? 'end_turn');
  return {
    id: jsonString(chat.id) ? `msg_${jsonString(chat.id)}` : 'msg_lightning',
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: matched === null || stop === 'tool_use' ? stop : 'stop_sequence',
    stop_sequence: stop === 'tool_use' ? null : matched,
    usage: {
      input_tokens: typeof usage.prompt_tokens === 'number' ? usage.prompt_tokens : 0,
      output_tokens: typeof usage.completion_tokens === 'number' ? usage.completion_tokens : 0,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    },
  };
}

/** The server-sent events a streaming Messages API call gets for a whole response (each `event:` + `data:`). */
export function anthropicResponseEvents(message: JsonObject): Array<{ event: string; data: JsonObject }> {
  const usage = isJsonObject(message.usage) ? message.usage : {};
  const events: Array<{ event: string; data: JsonObject }> = [
    {
      event: 'message_start',
      data: {
        type: 'message_start',
        message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 0 } },
      },
    },
  ];
  jsonList(message.content)
    .filter(isJsonObject)
    .forEach((block, index) => {
      const start: JsonObject =
        block.type === 'text'
          ? { type: 'text', text: '' }
          : block.type === 'tool_use'
            ? { ...block, input: {} }
            : block.type === 'thinking'
              ? { type: 'thinking', thinking: '', signature: '' }
              : block;
      events.push({ event: 'content_block_start', data: { type: 'content_block_start', index, content_block: start } });
      const delta = (value: JsonObject): void =>
        void events.push({ event: 'content_block_delta', data: { type: 'content_block_delta', index, delta: value } });
      if (block.type === 'text') delta({ type: 'text_delta', text: jsonString(block.text) });
      if (block.type === 'tool_use')
        delta({ type: 'input_json_delta', partial_json: JSON.stringify(block.input ?? {}) });
      if (block.type === 'thinking') {
        delta({ type: 'thinking_delta', thinking: jsonString(block.thinking) });
        delta({ type: 'signature_delta', signature: jsonString(block.signature) });
      }
      events.push({ event: 'content_block_stop', data: { type: 'content_block_stop', index } });
    });
  events.push({
    event: 'message_delta',
    data: {
      type: 'message_delta',
      delta: { stop_reason: message.stop_reason ?? null, stop_sequence: message.stop_sequence ?? null },
      usage: { output_tokens: usage.output_tokens ?? 0 },
    },
  });
  events.push({ event: 'message_stop', data: { type: 'message_stop' } });
  return events;
}

// ---------------------------------------------------------------------------------------------

/**
 * A recorded call's request and response as chat completions, whichever API it was made on: what
 * the panel, LightningRL and the chat export read. OpenAI calls are returned as they are.
 */
export function asChatCall(attributes: Readonly<Record<string, Json>>): {
  request: JsonObject | null;
  response: JsonObject | null;
} {
  const request = isJsonObject(attributes['lightning.request']) ? attributes['lightning.request'] : null;
  const recorded = isJsonObject(attributes['lightning.response']) ? attributes['lightning.response'] : null;
  // An error body (Anthropic `{type:"error"}`, Gemini `{error:{…}}`) stays an error: translated, it became an empty
  // assistant reply.
  const response = recorded && (recorded.type === 'error' || isJsonObject(recorded.error)) ? null : recorded;
  switch (jsonString(attributes['lightning.api'])) {
    case ANTHROPIC_MESSAGES:
      return {
        request: request && anthropicRequestToChat(request),
        response: response && anthropicResponseToChat(response),
      };
    case GEMINI_GENERATE:
      // The answer is the turn after the request's contents: its calls' ids are those its history will read.
      return {
        request: request && geminiRequestToChat(request, jsonString(attributes['gen_ai.request.model'])),
        response: response && geminiResponseToChat(response, request ? geminiContents(request).length : 0),
      };
    default:
      return { request, response };
  }
}
