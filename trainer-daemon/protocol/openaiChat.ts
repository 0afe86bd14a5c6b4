/**
 * OpenAI's other call shapes read as chat completions with tools, for training rows (LightningRL,
 * `lightning export --format chat`): the Responses API (instructions, input items, `function_call` /
 * `function_call_output` items, reasoning items, output items, `previous_response_id` resolved from
 * the rollout's own earlier calls) and chat's legacy `functions` / `function_call`, carried as
 * `tools` / `tool_calls` — the one form OpenAI's fine-tuning, chat templates and our trainer all read.
 * A call that has no faithful chat form says why (`issue`) instead of becoming a wrong row. Pure
 * functions of JSON; nothing here imports the rest of the daemon.
 */
import type { Json, JsonObject } from './json';
import { ANTHROPIC_MESSAGES, anthropicChatIssue, asChatCall } from './llmApis';
import { isJsonObject, jsonList, jsonString } from './json';

/** `lightning.api` of a call recorded on the Responses API. */
export const OPENAI_RESPONSES = 'responses';

/** A chat form, or why there is none. */
export type ChatForm<T> =
  { readonly chat: T; readonly issue?: undefined } | { readonly chat?: undefined; readonly issue: string };

const noChatForm = (type: string): string =>
  `a Responses \`${type}\` item has no chat form (hosted and custom tools' items, stored references have none)`;

// ---------------------------------------------------------------------------------------------
// Responses API

/** A message item's content parts as chat content: text as a string, else chat parts (images, files). */
function userContent(content: Json | undefined): ChatForm<Json> {
  if (typeof content === 'string') return { chat: content };
  const parts: JsonObject[] = [];
  for (const part of jsonList(content).filter(isJsonObject)) {
    const type = jsonString(part.type);
    if (type === 'input_text' || type === 'output_text' || type === 'text')
      parts.push({ type: 'text', text: jsonString(part.text) });
    else if (type === 'input_image' && jsonString(part.image_url)) {
      parts.push({
        type: 'image_url',
        image_url: {
          url: jsonString(part.image_url),
          ...(typeof part.detail === 'string' ? { detail: part.detail } : {}),
        },
      });
    } else if (type === 'input_image')
      return { issue: 'an input image given by file id has no chat form (chat images are URLs)' };
    else if (type === 'input_file') {
      const file: JsonObject = {};
      for (const key of ['file_id', 'file_data', 'filename'] as const)
        if (typeof part[key] === 'string') file[key] = part[key];
      parts.push({ type: 'file', file });
    } else return { issue: `a Responses \`${type || 'untyped'}\` content part has no chat form` };
  }
  return {
    chat: parts.every((part) => part.type === 'text') ? parts.map((part) => jsonString(part.text)).join('') : parts,
  };
}

/** An assistant message item's text and refusal (chat assistant content is text). */
function assistantText(content: Json | undefined): { text: string; refusal: string } {
  if (typeof content === 'string') return { text: content, refusal: '' };
  const parts = jsonList(content).filter(isJsonObject);
  return {
    text: parts
      .filter((p) => p.type === 'output_text' || p.type === 'input_text' || p.type === 'text')
      .map((p) => jsonString(p.text))
      .join(''),
    refusal: parts
      .filter((p) => p.type === 'refusal')
      .map((p) => jsonString(p.refusal))
      .join(''),
  };
}

/**
 * A reasoning item's readable text: its summary, else its content (open models' `reasoning_text`); encrypted content is
 * opaque.
 */
function reasoningText(item: JsonObject): string {
  const summary = jsonList(item.summary)
    .filter(isJsonObject)
    .map((p) => jsonString(p.text))
    .filter(Boolean);
  const content = jsonList(item.content)
    .filter(isJsonObject)
    .map((p) => jsonString(p.text))
    .filter(Boolean);
  return (summary.length > 0 ? summary : content).join('\n');
}

/** A function_call_output's output as a tool message's content (text only in chat). */
function toolOutput(output: Json | undefined): ChatForm<string> {
  if (typeof output === 'string') return { chat: output };
  const parts = jsonList(output).filter(isJsonObject);
  if (parts.some((p) => p.type !== 'input_text' && p.type !== 'output_text' && p.type !== 'text'))
    return { issue: 'a function_call_output with images or files has no chat form (chat tool results are text)' };
  return { chat: parts.map((p) => jsonString(p.text)).join('') };
}

/**
 * Responses items as chat messages, in order. An assistant message and the function calls after it
 * (before any tool result) are one assistant turn, as chat writes it; a reasoning item's text goes
 * to the assistant turn it precedes (`reasoning_content`, as Anthropic's thinking does);
 * `developer` is `system` (what chat templates and fine-tuning read).
 */
export function responsesItemsToChat(items: readonly Json[]): ChatForm<JsonObject[]> {
  const messages: JsonObject[] = [];
  let reasoning: string[] = [];
  // The assistant turn that function calls join: open until a tool result or another role comes.
  let turn = null as JsonObject | null;
  const assistantTurn = (): JsonObject => {
    if (!turn) {
      turn = { role: 'assistant', content: null };
      messages.push(turn);
    }
    // Reasoning between the turn's items (a message, then reasoning, then its calls) is the turn's too.
    if (reasoning.length > 0)
      turn.reasoning_content = [jsonString(turn.reasoning_content), ...reasoning].filter(Boolean).join('\n');
    reasoning = [];
    return turn;
  };
  for (const raw of items) {
    if (!isJsonObject(raw)) continue;
    const type = jsonString(raw.type) || 'message';
    if (type === 'reasoning') {
      const text = reasoningText(raw);
      if (text) reasoning.push(text);
      continue;
    }
    if (type === 'function_call') {
      const open = assistantTurn();
      open.tool_calls = [
        ...jsonList(open.tool_calls),
        {
          id: jsonString(raw.call_id) || jsonString(raw.id),
          type: 'function',
          function: { name: jsonString(raw.name), arguments: jsonString(raw.arguments) },
        },
      ];
      continue;
    }
    if (type === 'function_call_output') {
      const output = toolOutput(raw.output);
      if (output.issue !== undefined) return output;
      messages.push({ role: 'tool', tool_call_id: jsonString(raw.call_id), content: output.chat });
      turn = null;
      continue;
    }
    if (type !== 'message') return { issue: noChatForm(type) };
    const role = jsonString(raw.role) || 'user';
    if (role === 'assistant') {
      const { text, refusal } = assistantText(raw.content);
      // A message after the turn's calls starts the next turn; a second message item before them (rare) adds its text.
      if (turn?.tool_calls !== undefined) turn = null;
      const open = assistantTurn();
      open.content = `${jsonString(open.content)}${text}`;
      if (refusal) open.refusal = `${jsonString(open.refusal)}${refusal}`;
      continue;
    }
    const content = userContent(raw.content);
    if (content.issue !== undefined) return content;
    messages.push({ role: role === 'developer' ? 'system' : role, content: content.chat });
    turn = null;
  }
  // Chat writes an assistant turn with tool calls and no text as `content: null`, one with text as text.
  for (const message of messages)
    if (message.role === 'assistant' && message.content === null && message.tool_calls === undefined)
      message.content = '';
  return { chat: messages };
}

/** The request's conversation without its instructions: what a later call's `previous_response_id` continues. */
function responsesConversation(
  request: JsonObject,
  earlier: (responseId: string) => JsonObject[] | undefined,
): ChatForm<JsonObject[]> {
  if (request.conversation !== undefined && request.conversation !== null) {
    return {
      issue:
        'a Responses call in a stored conversation (`conversation`): its earlier turns are on the provider, not in the record',
    };
  }
  const previousId = jsonString(request.previous_response_id);
  const before = previousId ? earlier(previousId) : [];
  if (!before)
    return {
      issue: `previous_response_id ${previousId} is no earlier call of this rollout: the conversation it continues was not recorded`,
    };
  const items =
    typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : jsonList(request.input);
  const converted = responsesItemsToChat(items);
  return converted.issue !== undefined ? converted : { chat: [...before, ...converted.chat] };
}

/**
 * The Responses API's tools as chat tools: function tools; hosted tools (web search, files…) have no chat form and are
 * left out.
 */
function responsesTools(tools: Json | undefined): JsonObject[] {
  return jsonList(tools)
    .filter((tool): tool is JsonObject => isJsonObject(tool) && tool.type === 'function')
    .map((tool) => {
      const fn: JsonObject = { name: jsonString(tool.name) };
      if (typeof tool.description === 'string') fn.description = tool.description;
      fn.parameters = isJsonObject(tool.parameters) ? tool.parameters : { type: 'object', properties: {} };
      if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
      return { type: 'function', function: fn };
    });
}

/**
 * A Responses request as a chat completions request: `instructions` as the system message, then the
 * conversation (`previous_response_id` continued from `earlier`, the conversations of the rollout's
 * earlier calls by response id, their instructions not carried over, as the API does), and the tools.
 */
export function responsesRequestToChat(
  request: JsonObject,
  earlier: (responseId: string) => JsonObject[] | undefined = () => undefined,
): ChatForm<JsonObject> & { conversation?: JsonObject[] } {
  const conversation = responsesConversation(request, earlier);
  if (conversation.issue !== undefined) return conversation;
  const instructions = typeof request.instructions === 'string' ? request.instructions : '';
  const messages = [...(instructions ? [{ role: 'system', content: instructions }] : []), ...conversation.chat];
  const chat: JsonObject = { model: jsonString(request.model), messages };
  const tools = responsesTools(request.tools);
  if (tools.length > 0) chat.tools = tools;
  return { chat, conversation: conversation.chat };
}

const INCOMPLETE: Record<string, string> = { max_output_tokens: 'length', content_filter: 'content_filter' };

/** A Responses response (its output items) as a chat completion with one choice. */
export function responsesResponseToChat(response: JsonObject): ChatForm<JsonObject> {
  const output = jsonList(response.output);
  if (output.length === 0)
    return { issue: 'the response has no output items (the stream ended before response.completed)' };
  const converted = responsesItemsToChat(
    output.map((item) =>
      isJsonObject(item) && jsonString(item.type) === 'message' ? { ...item, role: 'assistant' } : item,
    ),
  );
  if (converted.issue !== undefined) return converted;
  const assistant = converted.chat.filter((message) => message.role === 'assistant');
  const message: JsonObject = { role: 'assistant', content: null };
  const text = assistant.map((m) => jsonString(m.content)).join('');
  const calls = assistant.flatMap((m) => jsonList(m.tool_calls));
  const reasoning = [...assistant.map((m) => jsonString(m.reasoning_content)), ...trailingReasoning(output)]
    .filter(Boolean)
    .join('\n');
  message.content = text || calls.length === 0 ? text : null;
  if (reasoning) message.reasoning_content = reasoning;
  const refusal = assistant.map((m) => jsonString(m.refusal)).join('');
  if (refusal) message.refusal = refusal;
  if (calls.length > 0) message.tool_calls = calls;
  const details = isJsonObject(response.incomplete_details) ? jsonString(response.incomplete_details.reason) : '';
  const usage = isJsonObject(response.usage) ? response.usage : {};
  const input = typeof usage.input_tokens === 'number' ? usage.input_tokens : 0;
  const outputTokens = typeof usage.output_tokens === 'number' ? usage.output_tokens : 0;
  return {
    chat: {
      id: jsonString(response.id),
      object: 'chat.completion',
      model: jsonString(response.model),
      choices: [
        {
          index: 0,
          message,
          finish_reason:
            calls.length > 0
              ? 'tool_calls'
              : response.status === 'incomplete'
                ? (INCOMPLETE[details] ?? 'length')
                : 'stop',
        },
      ],
      usage: { prompt_tokens: input, completion_tokens: outputTokens, total_tokens: input + outputTokens },
    },
  };
}

/** Reasoning after the last assistant item of an output (no turn to attach it to in the item walk). */
function trailingReasoning(output: readonly Json[]): string[] {
  const lastAssistant = output.findLastIndex(
    (item) => isJsonObject(item) && (item.type === 'message' || item.type === 'function_call'),
  );
  return output
    .slice(lastAssistant + 1)
    .filter((item): item is JsonObject => isJsonObject(item) && item.type === 'reasoning')
    .map(reasoningText);
}

// ---------------------------------------------------------------------------------------------
// Chat completions' legacy functions

/**
 * The id of the legacy `function_call` of the assistant message at `position` in the conversation
 * (legacy calls have none): the same in the history of every later request as in the reply that made
 * it (position = the request's message count).
 */
export const legacyCallId = (position: number): string => `call_${position}`;

function legacyCall(fn: JsonObject, position: number): JsonObject {
  return {
    id: legacyCallId(position),
    type: 'function',
    function: { name: jsonString(fn.name), arguments: jsonString(fn.arguments) },
  };
}

/**
 * A chat request's legacy `functions` as `tools`, assistant `function_call`s as `tool_calls`, and
 * `function` results as `tool` messages answering the latest call of that name. A request without
 * legacy fields is returned as it is.
 */
export function legacyFunctionsToTools(request: JsonObject): JsonObject {
  const messages = jsonList(request.messages);
  const legacy =
    Array.isArray(request.functions) ||
    messages.some((m) => isJsonObject(m) && (isJsonObject(m.function_call) || m.role === 'function'));
  if (!legacy) return request;
  const pending: Array<{ id: string; name: string }> = [];
  const converted = messages.map((raw, position): Json => {
    if (!isJsonObject(raw)) return raw;
    if (raw.role === 'assistant' && isJsonObject(raw.function_call) && !Array.isArray(raw.tool_calls)) {
      const { function_call: fn, ...rest } = raw;
      const call = legacyCall(fn, position);
      pending.push({ id: jsonString(call.id), name: jsonString(fn.name) });
      return { ...rest, content: rest.content ?? null, tool_calls: [call] };
    }
    if (raw.role === 'function') {
      const index = pending.findLastIndex((call) => call.name === jsonString(raw.name));
      const [call] = index < 0 ? [] : pending.splice(index, 1);
      return { role: 'tool', tool_call_id: call?.id ?? legacyCallId(position), content: raw.content ?? '' };
    }
    return raw;
  });
  const { functions, function_call: choice, ...rest } = request;
  const chat: JsonObject = { ...rest, messages: converted };
  const tools = [
    ...jsonList(rest.tools),
    ...jsonList(functions)
      .filter(isJsonObject)
      .map((fn) => ({ type: 'function', function: fn })),
  ];
  if (tools.length > 0) chat.tools = tools;
  if (choice !== undefined && rest.tool_choice === undefined)
    chat.tool_choice = isJsonObject(choice)
      ? { type: 'function', function: { name: jsonString(choice.name) } }
      : choice;
  return chat;
}

/**
 * A chat completion whose choices' messages carry a legacy `function_call`, with it as `tool_calls` (finish reason
 * `tool_calls`).
 */
export function legacyReplyToToolCalls(response: JsonObject, position: number): JsonObject {
  const choices = jsonList(response.choices);
  if (!choices.some((c) => isJsonObject(c) && isJsonObject(c.message) && isJsonObject(c.message.function_call)))
    return response;
  return {
    ...response,
    choices: choices.map((choice): Json => {
      if (
        !isJsonObject(choice) ||
        !isJsonObject(choice.message) ||
        !isJsonObject(choice.message.function_call) ||
        Array.isArray(choice.message.tool_calls)
      )
        return choice;
      const { function_call: fn, ...message } = choice.message;
      return {
        ...choice,
        message: { ...message, content: message.content ?? null, tool_calls: [legacyCall(fn, position)] },
        finish_reason: choice.finish_reason === 'function_call' ? 'tool_calls' : (choice.finish_reason ?? null),
      };
    }),
  };
}

// ---------------------------------------------------------------------------------------------

/** A recorded call as training reads it: chat request and completion, or why it has no chat form. */
export interface TrainingChat {
  readonly request: JsonObject | null;
  readonly response: JsonObject | null;
  /** How many choices the answer had (n > 1: only the first becomes a training row). */
  readonly choices: number;
  /** Why the call has no chat form (its messages or its reply), or null. */
  readonly issue: string | null;
}

/**
 * Reads one rollout's recorded calls, in order, as chat completions for training: Anthropic and
 * Gemini as asChatCall reads them, OpenAI's legacy functions as tools, and Responses calls with the
 * conversations of its earlier calls at hand (`previous_response_id`).
 */
export class TrainingChatReader {
  private readonly conversations = new Map<string, JsonObject[]>();

  read(attributes: Readonly<Record<string, Json>>): TrainingChat {
    const chat = asChatCall(attributes);
    if (attributes['lightning.api'] === OPENAI_RESPONSES) return this.readResponses(chat.request, chat.response);
    if (attributes['lightning.api'] === 'completions') {
      return {
        ...chat,
        choices: jsonList(chat.response?.choices).length,
        issue: 'a legacy /completions call: a text prompt, not chat messages',
      };
    }
    const request = chat.request && legacyFunctionsToTools(chat.request);
    const response = chat.response && legacyReplyToToolCalls(chat.response, jsonList(request?.messages).length);
    const recorded = attributes['lightning.request'];
    const issue =
      attributes['lightning.api'] === ANTHROPIC_MESSAGES && isJsonObject(recorded)
        ? anthropicChatIssue(recorded)
        : null;
    return { request, response, choices: jsonList(response?.choices).length, issue };
  }

  private readResponses(request: JsonObject | null, response: JsonObject | null): TrainingChat {
    const prompt = request ? responsesRequestToChat(request, (id) => this.conversations.get(id)) : null;
    const reply = response ? responsesResponseToChat(response) : null;
    const replyMessage = reply?.chat ? (jsonList(reply.chat.choices)[0] as JsonObject).message : undefined;
    if (prompt?.conversation && response && typeof response.id === 'string' && isJsonObject(replyMessage)) {
      this.conversations.set(response.id, [...prompt.conversation, replyMessage]);
    }
    return {
      request: prompt?.chat ?? null,
      response: reply?.chat ?? null,
      choices: reply?.chat ? 1 : 0,
      issue: prompt?.issue ?? reply?.issue ?? null,
    };
  }
}
