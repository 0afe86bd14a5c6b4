/**
 * The Gemini API as the proxy sees it (`POST /v1beta/models/{model}:generateContent`, and
 * `:streamGenerateContent` as server-sent events with `alt=sse` or as one JSON array without):
 * chunks merged into the response `generateContent` returns, `usageMetadata`, and errors in
 * Google's shape. The API key (`x-goog-api-key` or `key=`) is forwarded and never recorded.
 */
import { textOf, type JsonObject } from '../protocol';
import { TRUNCATED_MARKER, type Reassembler } from './reassemble';
import { isJsonObject } from '../protocol/json';

/** `/v1beta/models/gemini-2.5-flash:streamGenerateContent` → the model and whether it streams; null for other paths. */
export function geminiCall(path: string): { model: string; stream: boolean } | null {
  const match = /^\/v1(?:beta|alpha)?\/(?:tunedModels|models)\/([^/:?]+):(generateContent|streamGenerateContent)$/.exec(
    path,
  );
  return match ? { model: decodeURIComponent(match[1]!), stream: match[2] === 'streamGenerateContent' } : null;
}

export class GeminiReassembler implements Reassembler {
  private readonly head: JsonObject = {};
  private readonly candidates = new Map<number, { parts: JsonObject[]; rest: JsonObject }>();
  error: string | undefined;
  /** The stream's `error` object as it came: the record keeps it, so it is never read as an answer. */
  private errorObject: JsonObject | undefined;
  truncated = false;

  /** Every candidate has its finishReason, or the prompt was blocked (no candidates, a blockReason). */
  get complete(): boolean {
    const feedback = this.head.promptFeedback;
    if (isJsonObject(feedback) && typeof feedback.blockReason === 'string') return true;
    const candidates = [...this.candidates.values()];
    return candidates.length > 0 && candidates.every((candidate) => typeof candidate.rest.finishReason === 'string');
  }

  add(event: unknown): void {
    if (!isJsonObject(event)) return;
    if (isJsonObject(event.error)) {
      this.error = textOf(event.error.message ?? event.error);
      this.errorObject = event.error;
    }
    for (const key of ['usageMetadata', 'modelVersion', 'responseId', 'promptFeedback', 'createTime'] as const)
      if (event[key] !== undefined) this.head[key] = event[key];
    for (const raw of Array.isArray(event.candidates) ? event.candidates : []) {
      if (!isJsonObject(raw)) continue;
      const index = typeof raw.index === 'number' ? raw.index : 0;
      const draft = this.candidates.get(index) ?? { parts: [], rest: {} };
      this.candidates.set(index, draft);
      const { content, ...rest } = raw;
      Object.assign(draft.rest, rest);
      for (const part of isJsonObject(content) && Array.isArray(content.parts) ? content.parts : [])
        if (isJsonObject(part)) this.addPart(draft.parts, part);
    }
  }

  /** Text pieces join the previous text part of the same kind (answer or thought); other parts are whole. */
  private addPart(parts: JsonObject[], part: JsonObject): void {
    const last = parts.at(-1);
    const onlyText = (p: JsonObject): boolean =>
      Object.keys(p).every((key) => key === 'text' || key === 'thought' || key === 'thoughtSignature');
    if (
      last &&
      typeof part.text === 'string' &&
      typeof last.text === 'string' &&
      onlyText(part) &&
      onlyText(last) &&
      (part.thought === true) === (last.thought === true)
    ) {
      last.text = `${last.text}${part.text}`;
      if (part.thoughtSignature !== undefined) last.thoughtSignature = part.thoughtSignature;
      return;
    }
    parts.push({ ...part });
  }

  result(): JsonObject {
    const candidates = [...this.candidates.entries()]
      .sort(([a], [b]) => a - b)
      .map(([index, draft]) => ({ ...draft.rest, index, content: { role: 'model', parts: draft.parts } }));
    return {
      candidates,
      ...this.head,
      ...(this.errorObject ? { error: this.errorObject } : {}),
      ...(this.truncated ? TRUNCATED_MARKER : {}),
    };
  }
}

export function geminiUsage(response: JsonObject | null): {
  input: number | null;
  output: number | null;
  cacheRead: number | null;
} {
  const usage = isJsonObject(response?.usageMetadata) ? response.usageMetadata : undefined;
  const num = (key: string): number | null => (usage && typeof usage[key] === 'number' ? usage[key] : null);
  const candidates = num('candidatesTokenCount');
  const thoughts = num('thoughtsTokenCount');
  return {
    input: num('promptTokenCount'),
    output: candidates === null && thoughts === null ? null : (candidates ?? 0) + (thoughts ?? 0),
    cacheRead: num('cachedContentTokenCount'),
  };
}

const STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  413: 'INVALID_ARGUMENT',
  429: 'RESOURCE_EXHAUSTED',
  502: 'UNAVAILABLE',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

/** The body of an error the daemon itself answers on the Gemini API. */
export function geminiErrorBody(status: number, message: string): JsonObject {
  return { error: { code: status, message, status: STATUS[status] ?? 'INTERNAL' } };
}
