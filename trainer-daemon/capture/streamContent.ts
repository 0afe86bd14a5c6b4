/**
 * How much of a stream counts against the record's size limit: the content the record will hold
 * (text, tool arguments, logprobs), not the SSE framing around it. Each event of a chat stream
 * repeats its id, model, object and indices around a few characters of text, so counting whole
 * event payloads reached the 8 MiB limit at ~40k tokens; counting content reaches it at the answer's
 * own size, as the reassembled record (and the store's limit, protocol/secrets.ts) counts it.
 */
import type { Api } from './reassemble';

/** Per-event fields the reassembled record keeps once (or not at all): framing, not content. */
const FRAMING = new Set([
  'id',
  'object',
  'created',
  'model',
  'system_fingerprint',
  'service_tier',
  'type',
  'role',
  'index',
  'finish_reason',
  'stop_reason',
  'responseId',
  'modelVersion',
  'usage',
  'usageMetadata',
  'sequence_number',
  'item_id',
  'output_index',
  'content_index',
  'event_id',
  'obfuscation',
]);

function contentOf(value: unknown, depth: number): number {
  if (typeof value === 'string') return value.length;
  if (typeof value === 'number' || typeof value === 'boolean') return 1;
  if (value === null || typeof value !== 'object' || depth > 64) return 0;
  let total = 0;
  if (Array.isArray(value)) {
    for (const item of value) total += contentOf(item, depth + 1);
    return total;
  }
  for (const [key, item] of Object.entries(value)) if (!FRAMING.has(key)) total += contentOf(item, depth + 1);
  return total;
}

/**
 * The characters of content one parsed stream event adds to the record. A Responses API stream's
 * deltas are not kept (its final `response` event carries the whole answer), so only that counts.
 */
export function streamContentChars(api: Api, event: unknown): number {
  if (api === 'responses') {
    const response =
      event !== null && typeof event === 'object' && !Array.isArray(event)
        ? (event as { response?: unknown }).response
        : undefined;
    return contentOf(response, 0);
  }
  return contentOf(event, 0);
}
