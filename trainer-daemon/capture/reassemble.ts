/**
 * Rebuilds one response object from a stream of server-sent events, for the record: what the
 * non-streaming endpoint would have returned. Chat completions merge text and tool-call deltas
 * by index (parallel tool calls) and a legacy `function_call`'s name and arguments, keep the finish
 * reason, usage (`stream_options.include_usage`), logprobs (every list joined by its field: chat's
 * `content`/`refusal`, legacy completions' `tokens`/`token_logprobs`/`top_logprobs`/`text_offset`)
 * and engine token ids, reasoning under the field it came in, `annotations` and `reasoning_details`; legacy
 * completions concatenate text; the Responses API's final `response.completed` (or `.incomplete`/`.failed`) event
 * already carries the whole response.
 */
import type { Json, JsonObject } from '../protocol';
import { isJsonObject } from '../protocol/json';

export type Api =
  'chat.completions' | 'completions' | 'responses' | 'embeddings' | 'anthropic.messages' | 'gemini.generate_content';

/** Rebuilds one response from a stream's `data:` payloads (each API has its own). */
export interface Reassembler {
  add(event: unknown): void;
  result(): { [key: string]: Json };
  /** Set when the stream carried an error. */
  error: string | undefined;
  /** Set when the stream passed the record size limit: the result says so, and holds what came before. */
  truncated: boolean;
  /**
   * Whether the stream carried its end: `[DONE]` or a finish reason for every choice, `response.completed` (or
   * `.incomplete`, `.failed`), `message_stop` or a stop reason, a `finishReason`. One that stops before (a connection
   * closed cleanly mid-answer) is not a whole answer.
   */
  readonly complete: boolean;
  /** The stream's `[DONE]` line came (OpenAI's end of a stream; the parser does not hand it to `add`). */
  done?(): void;
}

/** What a truncated stream's record carries. */
export const TRUNCATED_MARKER = {
  lightning_truncated: 'the stream passed the record size limit; the rest was passed to the agent but not recorded',
} as const;

interface ToolCallDraft {
  index: number;
  id?: string;
  type?: string;
  function: { name: string; arguments: string };
}

interface ChoiceDraft {
  index: number;
  role?: string;
  content: string;
  refusal: string;
  /** Reasoning text by the field the server streamed it in (`reasoning_content`, `reasoning`), kept under that name. */
  reasoning: Map<'reasoning_content' | 'reasoning', string>;
  /** List fields whose deltas add entries: `annotations` (URL citations), `reasoning_details` (merged by index). */
  lists: Map<'annotations' | 'reasoning_details', JsonObject[]>;
  text: string;
  toolCalls: Map<number, ToolCallDraft>;
  /** A legacy `functions` answer's call (chat completions before `tools`). */
  functionCall?: { name: string; arguments: string };
  finishReason: Json;
  /** Each logprobs list, by field, joined across the stream's events. */
  logprobs: Map<string, Json[]>;
  tokenIds: Json[];
}

/**
 * A tool call's name after one more chunk's `name`. Servers split it across chunks (appended), or repeat the whole
 * name in every chunk, or resend it growing: a piece that starts with the name so far replaces it rather than adding
 * a second copy. The record keeps the name the model produced (`read_file`, as openai-node reads it), not the
 * server's repetition (`read_fileread_file`, as an SDK that only appends would read it).
 */
function withNamePiece(name: string, piece: string): string {
  return name !== '' && piece.startsWith(name) ? piece : name + piece;
}

/**
 * The error an upstream's JSON body carries (`{error: {message}}`, `{error: {code}}` or `{error: "..."}`), for the
 * record; undefined when it carries none (`"error": null` included).
 */
export function upstreamErrorMessage(json: JsonObject | null): string | undefined {
  const error = json?.error;
  if (error && typeof error === 'object' && !Array.isArray(error) && Object.keys(error).length > 0)
    return typeof error.message === 'string' && error.message !== ''
      ? error.message
      : JSON.stringify(error).slice(0, 500);
  return typeof error === 'string' && error !== '' ? error : undefined;
}

/**
 * Adds one streamed entry of a list field to the choice's list. `reasoning_details` entries (OpenRouter's) arrive as
 * pieces of the entry at their `index`: a piece of the same index and type appends its text (`text`, `summary`,
 * `data`) and sets its other fields, as the non-streaming answer holds one entry per index. Other entries (an
 * `annotations` citation) are whole and added in order.
 */
function addListEntry(
  lists: ChoiceDraft['lists'],
  field: 'annotations' | 'reasoning_details',
  entry: JsonObject,
): void {
  let list = lists.get(field);
  if (!list) lists.set(field, (list = []));
  const same =
    field === 'reasoning_details' && typeof entry.index === 'number'
      ? list.find((earlier) => earlier.index === entry.index && earlier.type === entry.type)
      : undefined;
  if (!same) {
    list.push({ ...entry });
    return;
  }
  for (const [key, value] of Object.entries(entry)) {
    if (value === null || value === undefined) continue;
    const earlier = same[key];
    same[key] =
      (key === 'text' || key === 'summary' || key === 'data') &&
      typeof earlier === 'string' &&
      typeof value === 'string'
        ? earlier + value
        : value;
  }
}

export class StreamReassembler implements Reassembler {
  private readonly head: JsonObject = {};
  private readonly choices = new Map<number, ChoiceDraft>();
  private usage: Json | undefined;
  private finalResponse: JsonObject | undefined;
  private readonly responseEvents: string[] = [];
  private eventCount = 0;
  /** Set when the stream went past the record limit and the rest was not reassembled. */
  truncated = false;
  /** Set when the stream carried an `error` payload. */
  error: string | undefined;
  /** `[DONE]` came. */
  private ended = false;
  /** (Responses) the response's last event came: `response.completed`, `.incomplete` or `.failed`. */
  private lastEvent = false;

  constructor(private readonly api: Api) {}

  done(): void {
    this.ended = true;
  }

  /**
   * Whether the answer reached its end. A Responses stream ends with its response's last event, whatever follows:
   * a `[DONE]` after `response.created` and some deltas (a server that cut the answer short) is not whole.
   */
  get complete(): boolean {
    if (this.api === 'responses') return this.lastEvent;
    if (this.ended) return true;
    return this.choices.size > 0 && [...this.choices.values()].every((choice) => choice.finishReason !== null);
  }

  /** Feeds one SSE `data:` payload (already JSON-parsed; `[DONE]` is skipped by the caller). */
  add(event: unknown): void {
    if (!isJsonObject(event)) return;
    this.eventCount += 1;
    // An error in the stream, as an object or a string (a server that reports a failed generation in its last chunk).
    const failed = upstreamErrorMessage(event);
    if (failed !== undefined) this.error = failed;
    if (this.api === 'responses') return this.addResponseEvent(event);
    for (const key of [
      'id',
      'object',
      'created',
      'model',
      'system_fingerprint',
      'service_tier',
      'prompt_token_ids',
    ] as const) {
      if (event[key] !== undefined && event[key] !== null) this.head[key] = event[key];
    }
    if (event.usage !== undefined && event.usage !== null) this.usage = event.usage;
    const choices = Array.isArray(event.choices) ? event.choices : [];
    for (const raw of choices) if (isJsonObject(raw)) this.addChoice(raw);
  }

  private addChoice(raw: JsonObject): void {
    const index = typeof raw.index === 'number' ? raw.index : 0;
    let draft = this.choices.get(index);
    if (!draft) {
      draft = {
        index,
        content: '',
        refusal: '',
        reasoning: new Map(),
        lists: new Map(),
        text: '',
        toolCalls: new Map(),
        finishReason: null,
        logprobs: new Map(),
        tokenIds: [],
      };
      this.choices.set(index, draft);
    }
    if (raw.finish_reason !== undefined && raw.finish_reason !== null) draft.finishReason = raw.finish_reason;
    if (typeof raw.text === 'string') draft.text += raw.text;
    if (Array.isArray(raw.token_ids)) draft.tokenIds.push(...raw.token_ids);
    if (isJsonObject(raw.logprobs)) {
      for (const [field, list] of Object.entries(raw.logprobs)) {
        if (!Array.isArray(list)) continue;
        const joined = draft.logprobs.get(field);
        if (joined) joined.push(...list);
        else draft.logprobs.set(field, [...list]);
      }
    }
    const delta = raw.delta;
    if (!isJsonObject(delta)) return;
    if (typeof delta.role === 'string') draft.role = delta.role;
    if (typeof delta.content === 'string') draft.content += delta.content;
    if (typeof delta.refusal === 'string') draft.refusal += delta.refusal;
    for (const field of ['reasoning_content', 'reasoning'] as const) {
      const piece = delta[field];
      if (typeof piece === 'string') draft.reasoning.set(field, (draft.reasoning.get(field) ?? '') + piece);
    }
    for (const field of ['annotations', 'reasoning_details'] as const) {
      const entries = delta[field];
      if (Array.isArray(entries))
        for (const entry of entries) if (isJsonObject(entry)) addListEntry(draft.lists, field, entry);
    }
    if (Array.isArray(delta.tool_calls))
      for (const call of delta.tool_calls) if (isJsonObject(call)) this.addToolCall(draft, call);
    if (isJsonObject(delta.function_call)) {
      draft.functionCall ??= { name: '', arguments: '' };
      if (typeof delta.function_call.name === 'string')
        draft.functionCall.name = withNamePiece(draft.functionCall.name, delta.function_call.name);
      if (typeof delta.function_call.arguments === 'string')
        draft.functionCall.arguments += delta.function_call.arguments;
    }
  }

  private addToolCall(draft: ChoiceDraft, call: JsonObject): void {
    const index = typeof call.index === 'number' ? call.index : draft.toolCalls.size;
    let tool = draft.toolCalls.get(index);
    if (!tool) {
      tool = { index, function: { name: '', arguments: '' } };
      draft.toolCalls.set(index, tool);
    }
    // A later chunk's empty id does not erase the call's (as the SDKs read it).
    if (typeof call.id === 'string' && call.id !== '') tool.id = call.id;
    if (typeof call.type === 'string') tool.type = call.type;
    if (isJsonObject(call.function)) {
      if (typeof call.function.name === 'string')
        tool.function.name = withNamePiece(tool.function.name, call.function.name);
      if (typeof call.function.arguments === 'string') tool.function.arguments += call.function.arguments;
    }
  }

  private addResponseEvent(event: JsonObject): void {
    const type = typeof event.type === 'string' ? event.type : '';
    if (this.responseEvents.length < 200) this.responseEvents.push(type);
    const last = type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed';
    // The last event ends the answer, with its response object or (a terse gateway's) without.
    if (last) this.lastEvent = true;
    if (isJsonObject(event.response) && (last || type === 'response.created')) this.finalResponse = event.response;
    if (type === 'error' && typeof event.message === 'string') this.error = event.message;
    // A response that failed mid-stream says why in the response itself: what it holds is not a whole answer.
    if (type === 'response.failed')
      this.error =
        (isJsonObject(event.response) ? upstreamErrorMessage(event.response) : undefined) ??
        'the response failed (response.failed)';
  }

  /** The response as the non-streaming endpoint would have returned it. */
  result(): JsonObject {
    const marker: JsonObject = this.truncated ? { ...TRUNCATED_MARKER } : {};
    if (this.api === 'responses') {
      return {
        ...(this.finalResponse ?? { object: 'response', status: 'incomplete' }),
        lightning_stream_events: this.eventCount,
        ...marker,
      };
    }
    const choices = [...this.choices.values()]
      .sort((a, b) => a.index - b.index)
      .map((draft) => this.choiceResult(draft));
    const result: JsonObject = {
      ...this.head,
      object: this.api === 'completions' ? 'text_completion' : 'chat.completion',
      choices,
    };
    if (this.usage !== undefined) result.usage = this.usage;
    return { ...result, ...marker };
  }

  private choiceResult(draft: ChoiceDraft): JsonObject {
    const choice: JsonObject = { index: draft.index, finish_reason: draft.finishReason };
    if (draft.logprobs.size > 0) choice.logprobs = Object.fromEntries(draft.logprobs);
    if (draft.tokenIds.length > 0) choice.token_ids = draft.tokenIds;
    if (this.api === 'completions') return { ...choice, text: draft.text };
    const message: JsonObject = {
      role: draft.role ?? 'assistant',
      content: draft.content.length > 0 ? draft.content : null,
    };
    if (draft.refusal) message.refusal = draft.refusal;
    for (const [field, text] of draft.reasoning) if (text) message[field] = text;
    for (const [field, entries] of draft.lists) message[field] = entries;
    if (draft.functionCall) message.function_call = draft.functionCall;
    if (draft.toolCalls.size > 0) {
      message.tool_calls = [...draft.toolCalls.values()]
        .sort((a, b) => a.index - b.index)
        .map((tool) => ({ id: tool.id ?? null, type: tool.type ?? 'function', function: tool.function }));
    }
    return { ...choice, message };
  }
}
