/**
 * A record fit for the store, and what it may hold. Every span enters the store scrubbed by `scrubSpan` (proxy, RPC
 * `spans/add`, the shared OTLP endpoint) or, in an OTLP decode worker, `scrubSpanWith` (protocol/preparedSpan.ts):
 * its secret values redacted (protocol/secrets.ts decides what a secret is) and the whole span cut to RECORD_LIMITS,
 * each cut marked. `scrubJsonValues` is the same redaction, uncut, for records read back out
 * (exports, training rows). Kept apart from secrets.ts: that file answers "is this a secret?", this one walks a record.
 */
import type { Json, SpanInput } from './records';
import { markTruncated } from './outcome';
import type { TruncationLimit } from './outcomeSchema';
import {
  headerSecretValues,
  isCredentialHeader,
  isSecretValue,
  REDACTED,
  rememberRolloutSecrets,
  requestSecretValues,
  scrubMessage,
  scrubText,
  scrubUrlCredentials,
  secretsOf,
  urlSecretValues,
} from './secrets';

/**
 * What a record may hold (docs/guarantees.md): JSON nested deeper than `maxDepth` is cut at that
 * depth, a string longer than `maxStringChars` is truncated, and once a record's strings and values
 * pass `maxRecordChars` in all, the rest is left out — each cut with a marker saying so, as OTel
 * SDKs truncate attributes. Deep or huge input can then neither overflow the stack of whatever
 * walks it later (JSON.stringify, the panel) nor make a rollout too large to read.
 */
export const RECORD_LIMITS = { maxDepth: 64, maxStringChars: 1024 * 1024, maxRecordChars: 8 * 1024 * 1024 } as const;

export const DEPTH_MARKER = `[lightning: nested deeper than ${RECORD_LIMITS.maxDepth} levels; left out]`;
const OMITTED_MARKER = '[lightning: record size limit reached; the rest is left out]';

/** What a record walk may still spend, in characters (shared by one span's attributes and events). */
export interface RecordBudget {
  left: number;
  /** The first limit the walk cut at, if any: an LLM call cut there is `truncated` (protocol/outcome.ts). */
  cut?: TruncationLimit;
  /** The exact secret values to redact (secretsOf); default the process's. */
  secrets?: readonly string[];
}

export function recordBudget(secrets?: readonly string[]): RecordBudget {
  return { left: RECORD_LIMITS.maxRecordChars, secrets };
}

/** Longer than any secret: how far past a cut the text is scrubbed, so a secret across the cut is found whole. */
const SECRET_MARGIN = 16 * 1024;

/**
 * `text`'s first `max` characters, scrubbed, and a marker saying how much was cut. The scrub runs before the cut, over
 * the kept part and a margin past it: a secret across the cut is redacted whole instead of kept in part (a part no
 * longer matches the secret's value or shape). The rest is never read: a regex over a 100 MB string is the cost
 * avoided.
 */
function scrubbedPrefix(text: string, max: number, scrub: (text: string) => string): string {
  const windowCut = text.length > max + SECRET_MARGIN;
  const window = scrub(windowCut ? text.slice(0, max + SECRET_MARGIN) : text);
  // Where the window itself was cut a secret may be split: that end is never kept.
  let end = Math.max(0, Math.min(max, windowCut ? window.length - SECRET_MARGIN : window.length));
  const marker = window.lastIndexOf(REDACTED, end);
  if (marker >= 0 && marker + REDACTED.length > end) end = marker + REDACTED.length;
  return `${window.slice(0, end)}…[lightning: truncated ${text.length - max} characters]`;
}

function capString(text: string, budget: RecordBudget): string {
  const limit = Math.max(0, Math.min(RECORD_LIMITS.maxStringChars, budget.left));
  if (text.length <= limit) {
    budget.left -= text.length;
    return scrubText(text, budget.secrets);
  }
  budget.cut ??= limit === RECORD_LIMITS.maxStringChars ? 'string_chars' : 'record_chars';
  budget.left -= limit;
  return scrubbedPrefix(text, limit, (part) => scrubText(part, budget.secrets));
}

/**
 * A JSON value with secret values redacted in every string (keys and structure untouched: a field
 * named `token` or `password` is content like any other), cut to RECORD_LIMITS. Recursion is
 * bounded by `maxDepth`, so no input overflows the stack.
 */
export function scrubSecrets(value: Json, budget: RecordBudget = { left: Infinity }, depth = 0): Json {
  if (typeof value === 'string') return capString(value, budget);
  if (value === null || typeof value !== 'object') {
    budget.left -= 8;
    return value;
  }
  if (depth >= RECORD_LIMITS.maxDepth) {
    budget.cut ??= 'depth';
    return DEPTH_MARKER;
  }
  // What did not change is returned as it came (no copy: most records have nothing to redact or cut).
  if (Array.isArray(value)) {
    let out: Json[] | undefined;
    for (let i = 0; i < value.length; i += 1) {
      if (budget.left <= 0) {
        budget.cut ??= 'record_chars';
        out ??= value.slice(0, i);
        out.push(OMITTED_MARKER);
        break;
      }
      const item = value[i]!;
      const scrubbed = scrubSecrets(item, budget, depth + 1);
      if (out) out.push(scrubbed);
      else if (scrubbed !== item) {
        out = value.slice(0, i);
        out.push(scrubbed);
      }
    }
    return out ?? value;
  }
  const keys = Object.keys(value);
  let out: { [key: string]: Json } | undefined;
  for (let i = 0; i < keys.length; i += 1) {
    const key = keys[i]!;
    if (budget.left <= 0) {
      budget.cut ??= 'record_chars';
      out ??= copyKeys(value, keys, i);
      setOwn(out, 'lightning.omitted', OMITTED_MARKER);
      break;
    }
    budget.left -= key.length;
    const inner = value[key]!;
    const scrubbed = scrubSecrets(inner, budget, depth + 1);
    if (out) setOwn(out, key, scrubbed);
    else if (scrubbed !== inner) {
      out = copyKeys(value, keys, i);
      setOwn(out, key, scrubbed);
    }
  }
  return out ?? value;
}

/** An own, enumerable property: `__proto__` too (plain assignment would set the prototype instead). */
function setOwn(out: { [key: string]: Json }, key: string, value: Json): void {
  if (key === '__proto__')
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  else out[key] = value;
}

/** A new object with `object`'s first `count` keys (in `keys`' order). */
function copyKeys(
  object: { readonly [key: string]: Json },
  keys: readonly string[],
  count: number,
): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  for (let i = 0; i < count; i += 1) setOwn(out, keys[i]!, object[keys[i]!]!);
  return out;
}

/**
 * A JSON value with every string scrubbed by value (scrubText), nothing else changed: keys, numbers
 * and structure stay. Returns the same object when nothing was redacted. For records read back out
 * (exports) and rewards; the store's spans go through scrubSpan (or scrubSpanWith).
 */
export function scrubJsonValues<T extends Json>(value: T, secrets: readonly string[] = secretsOf(), depth = 0): T {
  if (typeof value === 'string') return scrubText(value, secrets) as T;
  if (value === null || typeof value !== 'object' || depth > RECORD_LIMITS.maxDepth) return value;
  let changed = false;
  if (Array.isArray(value)) {
    const out = value.map((item) => {
      const scrubbed = scrubJsonValues(item, secrets, depth + 1);
      if (scrubbed !== item) changed = true;
      return scrubbed;
    });
    return (changed ? out : value) as T;
  }
  const out: { [key: string]: Json } = {};
  for (const [key, inner] of Object.entries(value)) {
    const scrubbed = scrubJsonValues(inner, secrets, depth + 1);
    if (scrubbed !== inner) changed = true;
    Object.defineProperty(out, key, { value: scrubbed, enumerable: true, writable: true, configurable: true });
  }
  return (changed ? out : value) as T;
}

/** Longest span name and status message kept (OTLP names over 1024 characters are refused before this). */
const MAX_NAME_CHARS = 1024;
const MAX_MESSAGE_CHARS = 64 * 1024;

function capText(text: string, max: number, secrets: readonly string[]): string {
  return text.length > max
    ? scrubbedPrefix(text, max, (part) => scrubMessage(part, secrets))
    : scrubMessage(text, secrets);
}

/**
 * A span attribute that records an HTTP header (`http.request.header.authorization`, OTel's convention), by the
 * header's name.
 */
const HEADER_ATTRIBUTE = /^(?:http\.(?:request|response)\.header\.)(.+)$/i;

/**
 * Whether a span attribute IS a credential header (its whole value is a credential), not content that may mention one.
 */
function isCredentialHeaderAttribute(key: string): boolean {
  // Exporters repeat the same few keys in every span: each is judged once.
  let known = credentialHeaderKeys.get(key);
  if (known === undefined) {
    const header = HEADER_ATTRIBUTE.exec(key)?.[1];
    known =
      header !== undefined
        ? isCredentialHeader(header)
        : /^(?:authorization|proxy-authorization|x-api-key|api-key|x-goog-api-key|cookie|set-cookie)$/i.test(key);
    if (credentialHeaderKeys.size >= 10_000) credentialHeaderKeys.clear();
    credentialHeaderKeys.set(key, known);
  }
  return known;
}
const credentialHeaderKeys = new Map<string, boolean>();

/**
 * Whether a span attribute is a URL or a URL's query (`url.full`, `http.url`, `url.query`), whose query credentials are
 * redacted.
 */
function isUrlAttribute(key: string, value: Json): value is string {
  return (
    typeof value === 'string' &&
    (key === 'url.query' || (value.includes('://') && /^[a-z][a-z0-9+.-]*:\/\/\S+$/i.test(value)))
  );
}

/**
 * The credential values a span's own header and URL attributes carry (what scrubSpan redacts there, and then everywhere
 * in the span).
 */
export function spanHeaderSecrets(span: SpanInput): string[] {
  const values: string[] = [];
  collectHeaderSecrets(span.attributes, values);
  for (const event of span.events) collectHeaderSecrets(event.attributes, values);
  return values.length === 0 ? values : values.filter(isSecretValue);
}

/** Into `values`: the credential values of these attributes' header and URL attributes (spanHeaderSecrets). */
function collectHeaderSecrets(attributes: SpanInput['attributes'], values: string[]): void {
  // A loop over the keys, not Object.entries: this runs for every span an agent exports.
  for (const key in attributes) {
    if (!Object.hasOwn(attributes, key)) continue;
    const value = attributes[key]!;
    if (isCredentialHeaderAttribute(key)) {
      const name = HEADER_ATTRIBUTE.exec(key)?.[1] ?? key;
      for (const one of Array.isArray(value) ? value : [value])
        if (typeof one === 'string') values.push(...headerSecretValues(name, one));
    } else if (isUrlAttribute(key, value)) {
      const query = key === 'url.query' ? value : value.includes('?') ? value.slice(value.indexOf('?') + 1) : '';
      values.push(
        ...requestSecretValues({}, query.split('#')[0]),
        ...(key === 'url.query' ? [] : urlSecretValues(value)),
      );
    }
  }
}

/**
 * A span's (or event's) attributes: credential headers redacted whole, URLs' query credentials, and every value
 * scrubbed.
 */
function scrubAttributes(attributes: SpanInput['attributes'], budget: RecordBudget): SpanInput['attributes'] {
  const secrets = budget.secrets ?? secretsOf();
  const keys = Object.keys(attributes);
  let out: { [key: string]: Json } | undefined;
  for (let i = 0; i < keys.length; i += 1) {
    const key = keys[i]!;
    const value = attributes[key]!;
    let kept: Json = value;
    if (isCredentialHeaderAttribute(key)) kept = Array.isArray(value) ? value.map(() => REDACTED) : REDACTED;
    else if (isUrlAttribute(key, value))
      kept =
        key === 'url.query' ? scrubUrlCredentials(`?${value}`, secrets).slice(1) : scrubUrlCredentials(value, secrets);
    if (out) setOwn(out, key, kept);
    else if (kept !== value) {
      out = copyKeys(attributes, keys, i);
      setOwn(out, key, kept);
    }
  }
  return scrubSecrets(out ?? attributes, budget) as SpanInput['attributes'];
}

/**
 * A span fit for the store, whoever made it (proxy, OTLP, RPC `spans/add`): every secret value
 * redacted — the process's, the rollout's (`rolloutId`: what its agent's requests carried), and
 * the credentials of this span's own header attributes, which are remembered for the rollout — in
 * the name, status message, event names and attributes at any depth (JSON strings included); and
 * the whole span cut to RECORD_LIMITS with one budget for its attributes and events.
 */
export function scrubSpan(span: SpanInput, rolloutId?: string | null): SpanInput {
  const found = spanHeaderSecrets(span);
  if (rolloutId && found.length > 0) rememberRolloutSecrets(rolloutId, found);
  return scrubSpanWith(span, withSecrets(secretsOf(rolloutId), found));
}

/** `secrets` and `more` as one list, longest first (`secrets` itself when `more` is empty). */
export function withSecrets(secrets: readonly string[], more: readonly string[]): readonly string[] {
  return more.length > 0 ? [...new Set([...secrets, ...more])].sort((a, b) => b.length - a.length) : secrets;
}

/**
 * scrubSpan with the secret values given (longest first) instead of the process's and the rollout's: for a thread
 * that has no such state, the OTLP decode workers (protocol/preparedSpan.ts). The span's own header secrets are the
 * caller's to find (spanHeaderSecrets) and add.
 */
export function scrubSpanWith(span: SpanInput, secrets: readonly string[]): SpanInput {
  const budget = recordBudget(secrets);
  const attributes = scrubAttributes(span.attributes, budget);
  const events = span.events.map((event) => ({
    ...event,
    name: capText(event.name, MAX_NAME_CHARS, secrets),
    attributes: scrubAttributes(event.attributes, budget),
  }));
  // Field by field, not `{ ...span, name, … }`: V8 copies a spread with keys overridden on its slow path (~3 µs a
  // span).
  return {
    traceId: span.traceId,
    spanId: span.spanId,
    parentSpanId: span.parentSpanId,
    name: capText(span.name, MAX_NAME_CHARS, secrets),
    kind: span.kind,
    category: span.category,
    startMs: span.startMs,
    endMs: span.endMs,
    statusCode: span.statusCode,
    statusMessage: span.statusMessage === null ? null : capText(span.statusMessage, MAX_MESSAGE_CHARS, secrets),
    // A call whose record was cut is not the whole exchange: training leaves it out (protocol/outcome.ts).
    attributes: budget.cut && span.category === 'llm' ? markTruncated(attributes, budget.cut) : attributes,
    events,
    promptTokens: span.promptTokens,
    completionTokens: span.completionTokens,
  };
}
