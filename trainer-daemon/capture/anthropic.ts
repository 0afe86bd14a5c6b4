/**
 * The Anthropic Messages API as the proxy sees it (`POST /v1/messages`, JSON or server-sent events):
 * a stream rebuilt into the message the non-streaming endpoint returns, its usage (cache tokens
 * included), and errors in Anthropic's own shape, so that the SDK reports the daemon's own failures
 * (an unreachable upstream, a revoked rollout URL) as it reports the API's.
 */
import { textOf, type Json, type JsonObject } from '../protocol';
import { TRUNCATED_MARKER, type Reassembler } from './reassemble';
import { isJsonObject, jsonString } from '../protocol/json';

interface BlockDraft {
  block: JsonObject;
  /** `input_json_delta` pieces of a tool_use block, parsed when the block stops. */
  json: string;
}

export class AnthropicReassembler implements Reassembler {
  private message: JsonObject = { type: 'message', role: 'assistant', content: [] };
  private readonly blocks = new Map<number, BlockDraft>();
  private usage: JsonObject = {};
  error: string | undefined;
  /** The stream's `error` event as it came: the record keeps it, so it is never read as an answer. */
  private errorEvent: JsonObject | undefined;
  truncated = false;
  private stopped = false;

  get complete(): boolean {
    return this.stopped || typeof this.message.stop_reason === 'string';
  }

  add(event: unknown): void {
    if (!isJsonObject(event)) return;
    switch (jsonString(event.type)) {
      case 'message_stop':
        this.stopped = true;
        return;
      case 'message_start':
        if (isJsonObject(event.message)) {
          this.message = { ...event.message };
          if (isJsonObject(event.message.usage)) this.usage = { ...event.message.usage };
        }
        return;
      case 'content_block_start':
        if (typeof event.index === 'number' && isJsonObject(event.content_block))
          this.blocks.set(event.index, { block: { ...event.content_block }, json: '' });
        return;
      case 'content_block_delta':
        if (typeof event.index === 'number' && isJsonObject(event.delta)) this.addDelta(event.index, event.delta);
        return;
      case 'content_block_stop':
        if (typeof event.index === 'number') this.stopBlock(event.index);
        return;
      case 'message_delta':
        if (isJsonObject(event.delta))
          for (const [key, value] of Object.entries(event.delta)) this.message[key] = value;
        if (isJsonObject(event.usage))
          for (const [key, value] of Object.entries(event.usage)) if (value !== null) this.usage[key] = value;
        return;
      case 'error':
        this.error = isJsonObject(event.error)
          ? `${textOf(event.error.type, 'error')}: ${textOf(event.error.message)}`
          : 'the stream reported an error';
        this.errorEvent = isJsonObject(event.error) ? event.error : { type: 'api_error', message: this.error };
        return;
      default:
        // ping and event types added later carry nothing the record needs.
        return;
    }
  }

  private addDelta(index: number, delta: JsonObject): void {
    const draft = this.blocks.get(index) ?? { block: { type: 'text', text: '' }, json: '' };
    this.blocks.set(index, draft);
    const append = (key: string, piece: Json | undefined): void => {
      if (typeof piece === 'string')
        draft.block[key] = `${typeof draft.block[key] === 'string' ? draft.block[key] : ''}${piece}`;
    };
    switch (jsonString(delta.type)) {
      case 'text_delta':
        return append('text', delta.text);
      case 'input_json_delta':
        draft.json += typeof delta.partial_json === 'string' ? delta.partial_json : '';
        return;
      case 'thinking_delta':
        return append('thinking', delta.thinking);
      case 'signature_delta':
        return append('signature', delta.signature);
      case 'citations_delta':
        draft.block.citations = [
          ...(Array.isArray(draft.block.citations) ? draft.block.citations : []),
          delta.citation ?? null,
        ];
        return;
      default:
        return;
    }
  }

  private stopBlock(index: number): void {
    const draft = this.blocks.get(index);
    if (!draft || draft.json === '') return;
    try {
      draft.block.input = JSON.parse(draft.json) as Json;
    } catch {
      draft.block.input = { lightning_unparsed_input: draft.json };
    }
    draft.json = '';
  }

  result(): JsonObject {
    for (const index of this.blocks.keys()) this.stopBlock(index);
    const content = [...this.blocks.entries()].sort(([a], [b]) => a - b).map(([, draft]) => draft.block);
    // A stream that failed before any content is the error body the non-streaming endpoint would have sent.
    if (this.errorEvent && content.length === 0) return { type: 'error', error: this.errorEvent };
    return {
      ...this.message,
      content,
      usage: this.usage,
      ...(this.errorEvent ? { error: this.errorEvent } : {}),
      ...(this.truncated ? TRUNCATED_MARKER : {}),
    };
  }
}

/** Input tokens with the cached ones (written and read), as OpenTelemetry counts them; output tokens. */
export function anthropicUsage(response: JsonObject | null): {
  input: number | null;
  output: number | null;
  cacheRead: number | null;
  cacheCreation: number | null;
} {
  const usage = isJsonObject(response?.usage) ? response.usage : undefined;
  const num = (key: string): number | null => (usage && typeof usage[key] === 'number' ? usage[key] : null);
  const base = num('input_tokens');
  const cacheRead = num('cache_read_input_tokens');
  const cacheCreation = num('cache_creation_input_tokens');
  return {
    input: base === null ? null : base + (cacheRead ?? 0) + (cacheCreation ?? 0),
    output: num('output_tokens'),
    cacheRead,
    cacheCreation,
  };
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  529: 'overloaded_error',
};

/** The body of an error the daemon itself answers on the Messages API. */
export function anthropicErrorBody(status: number, message: string): JsonObject {
  return { type: 'error', error: { type: ERROR_TYPES[status] ?? 'api_error', message } };
}
