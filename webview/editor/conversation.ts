/**
 * An LLM call span as a conversation, pure: the turns of its recorded request (system, user,
 * assistant, tool) and of its response, each made of blocks — text, thinking, a tool call with its
 * arguments, a tool result, an image — read generically from the shapes the proxy records in
 * `lightning.request` / `lightning.response`: OpenAI chat completions, completions and Responses,
 * Anthropic Messages (`system`, content blocks, `tool_use` / `tool_result` / `thinking`), Gemini
 * (`contents` / `candidates` with `parts`, `systemInstruction`); else OpenTelemetry's `gen_ai.*`
 * message attributes. Unknown parts are kept as JSON rather than dropped.
 */
import type { Json, JsonObject, Span } from '../../trainer-daemon/protocol/records';
import { isJsonObject, textOf } from '../../trainer-daemon/protocol/json';
import { assertNever } from '../../trainer-daemon/protocol/assert';

export type Block =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'thinking'; readonly text: string }
  | { readonly kind: 'toolCall'; readonly name: string; readonly arguments: string; readonly id: string | null }
  | { readonly kind: 'toolResult'; readonly text: string; readonly id: string | null }
  | { readonly kind: 'image'; readonly text: string };

export interface Turn {
  /** system | user | assistant | tool (Gemini's `model` is assistant), or the role as recorded. */
  readonly role: string;
  readonly blocks: readonly Block[];
}

export interface Conversation {
  readonly model: string;
  readonly turns: readonly Turn[];
  readonly response: readonly Turn[];
  readonly tools: readonly { readonly name: string; readonly description: string }[];
  readonly promptTokens: number | null;
  readonly completionTokens: number | null;
  /** Reasoning tokens when the response's usage says (OpenAI `reasoning_tokens`, Gemini `thoughtsTokenCount`). */
  readonly reasoningTokens: number | null;
  readonly latencyMs: number | null;
  readonly error: string | null;
  readonly request: Json | null;
  readonly rawResponse: Json | null;
}

const parseJson = (value: Json | undefined): Json | undefined => {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value) as Json;
  } catch {
    return undefined;
  }
};

function role(value: Json | undefined): string {
  const name = textOf(value);
  return name === 'model' ? 'assistant' : name === 'function' ? 'tool' : name || 'message';
}

/** One content part, in any of the shapes above. */
function partBlocks(part: Json): Block[] {
  if (typeof part === 'string') return [{ kind: 'text', text: part }];
  if (!isJsonObject(part)) return [{ kind: 'text', text: textOf(part) }];
  const type = textOf(part.type);
  if (type === 'thinking' || type === 'reasoning' || part.thought === true)
    return [{ kind: 'thinking', text: textOf(part.thinking ?? part.text ?? part.summary) }];
  if (type === 'redacted_thinking') return [{ kind: 'thinking', text: '(redacted thinking)' }];
  if (type === 'tool_use' || type === 'function_call')
    return [
      {
        kind: 'toolCall',
        name: textOf(part.name),
        arguments: textOf(part.input ?? part.arguments),
        id: textOf(part.id ?? part.call_id) || null,
      },
    ];
  if (type === 'tool_result' || type === 'function_call_output') {
    const content = Array.isArray(part.content)
      ? part.content.flatMap(partBlocks).map(blockText).join('\n')
      : textOf(part.content ?? part.output);
    return [{ kind: 'toolResult', text: content, id: textOf(part.tool_use_id ?? part.call_id) || null }];
  }
  if (isJsonObject(part.functionCall))
    return [
      {
        kind: 'toolCall',
        name: textOf(part.functionCall.name),
        arguments: textOf(part.functionCall.args),
        id: textOf(part.functionCall.id) || null,
      },
    ];
  if (isJsonObject(part.functionResponse))
    return [
      {
        kind: 'toolResult',
        text: textOf(part.functionResponse.response),
        id: textOf(part.functionResponse.name) || null,
      },
    ];
  if (type === 'image_url' || type === 'image' || type === 'input_image' || part.inlineData !== undefined)
    return [
      {
        kind: 'image',
        text: `[image${isJsonObject(part.image_url) ? ` ${textOf(part.image_url.url).slice(0, 80)}` : ''}]`,
      },
    ];
  if (typeof part.text === 'string') return [{ kind: 'text', text: part.text }];
  if (typeof part.content === 'string') return [{ kind: 'text', text: part.content }];
  return [{ kind: 'text', text: JSON.stringify(part) }];
}

function contentBlocks(content: Json | undefined): Block[] {
  if (content === undefined || content === null || content === '') return [];
  if (Array.isArray(content)) return content.flatMap(partBlocks);
  return partBlocks(content);
}

/** A message of chat completions, Anthropic Messages, Gemini contents, or a Responses input item. */
function turnOf(message: JsonObject): Turn {
  const type = textOf(message.type);
  if (type === 'function_call') return { role: 'assistant', blocks: partBlocks(message) };
  if (type === 'function_call_output') return { role: 'tool', blocks: partBlocks(message) };
  if (type === 'reasoning')
    return {
      role: 'assistant',
      blocks: [
        {
          kind: 'thinking',
          text: Array.isArray(message.summary)
            ? message.summary.map((s) => (isJsonObject(s) ? textOf(s.text) : textOf(s))).join('\n')
            : textOf(message.summary),
        },
      ],
    };
  const blocks: Block[] = [];
  const reasoning = message.reasoning_content ?? message.reasoning;
  if (typeof reasoning === 'string' && reasoning) blocks.push({ kind: 'thinking', text: reasoning });
  const who = role(message.role ?? (type === 'message' ? undefined : type));
  const content = contentBlocks(message.content ?? message.parts);
  // A chat `tool` message's content is the tool's result.
  if (who === 'tool')
    blocks.push(
      ...content.map((block): Block =>
        block.kind === 'text'
          ? { kind: 'toolResult', text: block.text, id: textOf(message.tool_call_id) || null }
          : block,
      ),
    );
  else blocks.push(...content);
  // Anthropic and Gemini send tool results in a user turn: shown as the tool's turn.
  if (who === 'user' && blocks.length > 0 && blocks.every((block) => block.kind === 'toolResult'))
    return { role: 'tool', blocks };
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls.filter(isJsonObject)) {
      const fn = isJsonObject(call.function) ? call.function : call;
      blocks.push({
        kind: 'toolCall',
        name: textOf(fn.name),
        arguments: textOf(fn.arguments),
        id: textOf(call.id) || null,
      });
    }
  }
  return { role: who, blocks };
}

function systemTurn(system: Json | undefined): Turn[] {
  if (system === undefined || system === null) return [];
  const blocks =
    isJsonObject(system) && Array.isArray(system.parts) ? contentBlocks(system.parts) : contentBlocks(system);
  return blocks.length ? [{ role: 'system', blocks }] : [];
}

function requestTurns(request: JsonObject): Turn[] {
  const turns: Turn[] = [
    ...systemTurn(request.system),
    ...systemTurn(request.systemInstruction ?? request.system_instruction),
  ];
  if (typeof request.instructions === 'string')
    turns.push({ role: 'system', blocks: [{ kind: 'text', text: request.instructions }] });
  for (const list of [request.messages, request.contents, request.input]) {
    if (typeof list === 'string') turns.push({ role: 'user', blocks: [{ kind: 'text', text: list }] });
    else if (Array.isArray(list)) turns.push(...list.filter(isJsonObject).map(turnOf));
  }
  if (typeof request.prompt === 'string')
    turns.push({ role: 'user', blocks: [{ kind: 'text', text: request.prompt }] });
  return turns;
}

function responseTurns(response: JsonObject): Turn[] {
  if (Array.isArray(response.choices)) {
    const choice = response.choices.find(isJsonObject);
    if (choice && isJsonObject(choice.message)) return [turnOf({ role: 'assistant', ...choice.message })];
    if (choice && typeof choice.text === 'string')
      return [{ role: 'assistant', blocks: [{ kind: 'text', text: choice.text }] }];
  }
  if (Array.isArray(response.candidates)) {
    const candidate = response.candidates.find(isJsonObject);
    if (candidate && isJsonObject(candidate.content)) return [turnOf({ role: 'assistant', ...candidate.content })];
  }
  if (Array.isArray(response.output)) {
    const blocks = response.output.filter(isJsonObject).flatMap((item) => turnOf(item).blocks);
    return [{ role: 'assistant', blocks }];
  }
  if (Array.isArray(response.content)) return [{ role: 'assistant', blocks: contentBlocks(response.content) }];
  return [];
}

function toolList(request: JsonObject): Conversation['tools'] {
  if (!Array.isArray(request.tools)) return [];
  return request.tools.filter(isJsonObject).flatMap((tool) => {
    if (Array.isArray(tool.functionDeclarations))
      return tool.functionDeclarations
        .filter(isJsonObject)
        .map((fn) => ({ name: textOf(fn.name), description: textOf(fn.description) }));
    const fn = isJsonObject(tool.function) ? tool.function : tool;
    return [{ name: textOf(fn.name ?? tool.type), description: textOf(fn.description) }];
  });
}

function reasoningTokens(response: JsonObject | null): number | null {
  if (!response) return null;
  const usage = isJsonObject(response.usage)
    ? response.usage
    : isJsonObject(response.usageMetadata)
      ? response.usageMetadata
      : null;
  if (!usage) return null;
  const details = isJsonObject(usage.completion_tokens_details)
    ? usage.completion_tokens_details
    : isJsonObject(usage.output_tokens_details)
      ? usage.output_tokens_details
      : {};
  const value = details.reasoning_tokens ?? usage.thoughtsTokenCount;
  return typeof value === 'number' ? value : null;
}

/**
 * OpenTelemetry GenAI messages (`gen_ai.input.messages` / `gen_ai.output.messages`, JSON) or the older
 * prompt/completion attributes.
 */
function otelTurns(attributes: Span['attributes'], key: string, fallback: string, defaultRole: string): Turn[] {
  const messages = parseJson(attributes[key]);
  if (Array.isArray(messages)) return messages.filter(isJsonObject).map(turnOf);
  const plain = attributes[fallback];
  return typeof plain === 'string' && plain ? [{ role: defaultRole, blocks: [{ kind: 'text', text: plain }] }] : [];
}

export function conversationOf(span: Span): Conversation {
  const attributes = span.attributes;
  const recorded = attributes['lightning.request'];
  const request = isJsonObject(recorded) ? recorded : null;
  const rawResponse = attributes['lightning.response'];
  const response = isJsonObject(rawResponse) ? rawResponse : null;
  const turns = request
    ? requestTurns(request)
    : otelTurns(attributes, 'gen_ai.input.messages', 'gen_ai.prompt', 'user');
  const answer = response
    ? responseTurns(response)
    : otelTurns(attributes, 'gen_ai.output.messages', 'gen_ai.completion', 'assistant');
  return {
    model:
      textOf(
        attributes['gen_ai.response.model'] ??
          attributes['gen_ai.request.model'] ??
          request?.model ??
          response?.model ??
          response?.modelVersion,
      ) || 'unknown model',
    turns,
    response: answer,
    tools: request ? toolList(request) : [],
    promptTokens: span.promptTokens,
    completionTokens: span.completionTokens,
    reasoningTokens: reasoningTokens(response),
    latencyMs: span.endMs === null ? null : span.endMs - span.startMs,
    error: span.statusCode === 'error' ? (span.statusMessage ?? 'error') : null,
    request: recorded ?? null,
    rawResponse: rawResponse ?? null,
  };
}

export function blockText(block: Block): string {
  switch (block.kind) {
    case 'toolCall':
      return `${block.name}(${block.arguments})`;
    case 'text':
    case 'thinking':
    case 'toolResult':
    case 'image':
      return block.text;
    default:
      return assertNever(block);
  }
}

/** A turn as plain text (copy, compare): thinking left out. */
export function turnText(turn: Turn): string {
  return turn.blocks
    .filter((block) => block.kind !== 'thinking')
    .map(blockText)
    .join('\n');
}
