/**
 * The one place that decides what a secret looks like. Everything stored or logged — proxy
 * records, OTLP spans, command lines, upstream URLs, log fields — goes through here: credential-
 * named fields are dropped, key-shaped strings and per-rollout capability URLs are redacted.
 */
import type { Json, SpanInput } from './records';
import { markTruncated } from './outcome';
import type { TruncationLimit } from './outcomeSchema';

const CREDENTIAL_WORDS = new Set(['authorization', 'password', 'passwd', 'secret', 'secrets', 'cookie', 'cookies', 'apikey', 'credential', 'credentials']);
/** `token` is a credential (`access_token`, `x-auth-token`) except where it counts or lists tokens. */
const TOKEN_ACCOUNTING_WORDS = new Set(['count', 'counts', 'ids', 'id', 'logprobs', 'usage', 'type', 'limit']);

/** Shapes of provider API keys and bearer tokens, wherever they hide. */
const SECRET_VALUE = /\b(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|Bearer\s+[A-Za-z0-9._~+/-]{16,}=*|AIza[0-9A-Za-z_-]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abpors]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}|gsk_[A-Za-z0-9]{20,})/g;
/** A rollout's capability URL path: whoever reads it could write into that rollout. */
const CAPABILITY_PATH = /\/r\/[A-Za-z0-9_-]{16,64}(?=\/|\b|$)/g;
/** Credentials in a URL query (`?key=AIza…`, `&api_key=…`). */
const QUERY_SECRET = /([?&](?:key|api[-_]?key|access[-_]?token|token|sig|signature)=)[^&#\s]+/gi;

const known = new Map<string, boolean>();

/**
 * Whether a field name names a credential. Names are split into words (separators and camelCase)
 * so that `gen_ai.usage.input_tokens` or `llm.token_count.prompt` stay while `x-api-key`, `apiKey`,
 * `http.request.header.authorization` and `auth_token` go. Results are remembered (names repeat).
 */
export function isCredentialKey(key: string): boolean {
  let answer = known.get(key);
  if (answer === undefined) {
    answer = classify(key);
    if (known.size >= 10_000) known.clear();
    known.set(key, answer);
  }
  return answer;
}

function classify(key: string): boolean {
  const words = key.replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
  return words.some((word, i) => {
    if (CREDENTIAL_WORDS.has(word)) return true;
    if ((word === 'api' || word === 'private') && words[i + 1] === 'key') return true;
    return word === 'token' && !TOKEN_ACCOUNTING_WORDS.has(words[i + 1] ?? '');
  });
}

/** Words that make an environment variable's name a credential's (`GITHUB_TOKEN`, `DB_PWD`, `LLM_AUTH`, `SIGNING_KEY`). */
const ENV_CREDENTIAL_WORDS = new Set(['key', 'token', 'auth', 'pass', 'pwd', 'passphrase']);

/**
 * Whether an environment variable holds a secret: by its name (a credential's, as above, or
 * `…_KEY`, `…_TOKEN`, `…_AUTH`, `…_PWD`), or by its value (a key-shaped string, a URL with a password).
 */
export function isSecretVariable(name: string, value: string): boolean {
  if (isCredentialKey(name) || name.toLowerCase().split(/[^a-z0-9]+/).some((word) => ENV_CREDENTIAL_WORDS.has(word))) return true;
  if (scrubText(value) !== value) return true;
  return /^[a-z][a-z0-9+.-]*:\/\/[^/@\s]*:[^/@\s]+@/i.test(value);
}

/**
 * Exact secret values this process knows (the daemon's own upstream key): redacted wherever they
 * appear, whatever their shape — an upstream that echoes the key in an error must not get it stored.
 */
const knownSecrets = new Set<string>();

/** Registers a secret value to redact verbatim (values under 8 characters are too common to match). */
export function registerSecretValue(value: string | undefined): void {
  if (value && value.length >= 8) knownSecrets.add(value);
}

export function scrubText(text: string): string {
  for (const secret of knownSecrets) if (text.includes(secret)) text = text.split(secret).join('[redacted]');
  if (!/sk-|Bearer|AIza|gh[pousr]_|xox|hf_|gsk_|\/r\/|[?&]/.test(text)) return text;
  return text.replace(SECRET_VALUE, '[redacted]').replace(CAPABILITY_PATH, '/r/…').replace(QUERY_SECRET, '$1[redacted]');
}

/** `name: VALUE` / `name=VALUE` where the name is a credential's (`x-api-key: …`, `password=…`). */
const NAMED_VALUE = /([A-Za-z][A-Za-z0-9_.-]*)(\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&"']+)/g;

/**
 * Free text that may quote headers or assignments (error messages, status messages, argv words):
 * key shapes redacted as in `scrubText`, and the value after any credential-named `name:`/`name=`.
 */
export function scrubMessage(text: string): string {
  const scrubbed = scrubText(text);
  if (!/key|token|pass|secret|auth|cookie|credential/i.test(scrubbed)) return scrubbed;
  return scrubbed.replace(NAMED_VALUE, (whole, name: string, separator: string) => (isCredentialKey(name) ? `${name}${separator}[redacted]` : whole));
}

/**
 * What a record may hold (README "Guarantees"): JSON nested deeper than `maxDepth` is cut at that
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
}

export function recordBudget(): RecordBudget {
  return { left: RECORD_LIMITS.maxRecordChars };
}

function capString(text: string, budget: RecordBudget): string {
  const limit = Math.max(0, Math.min(RECORD_LIMITS.maxStringChars, budget.left));
  const kept = text.length > limit ? `${text.slice(0, limit)}…[lightning: truncated ${text.length - limit} characters]` : text;
  if (text.length > limit) budget.cut ??= limit === RECORD_LIMITS.maxStringChars ? 'string_chars' : 'record_chars';
  budget.left -= Math.min(text.length, limit);
  // Scrubbed after the cut: a regex over a 100 MB string is the cost being avoided.
  return scrubText(kept);
}

/**
 * A JSON value with credential-named fields dropped (at any depth), secret-looking strings redacted,
 * and cut to RECORD_LIMITS. Recursion is bounded by `maxDepth`, so no input overflows the stack.
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
  if (Array.isArray(value)) {
    const out: Json[] = [];
    for (const item of value) {
      if (budget.left <= 0) {
        budget.cut ??= 'record_chars';
        out.push(OMITTED_MARKER);
        break;
      }
      out.push(scrubSecrets(item, budget, depth + 1));
    }
    return out;
  }
  const out: { [key: string]: Json } = {};
  for (const [key, inner] of Object.entries(value)) {
    if (isCredentialKey(key)) continue;
    if (budget.left <= 0) {
      budget.cut ??= 'record_chars';
      Object.defineProperty(out, 'lightning.omitted', { value: OMITTED_MARKER, enumerable: true, writable: true, configurable: true });
      break;
    }
    budget.left -= key.length;
    Object.defineProperty(out, key, { value: scrubSecrets(inner, budget, depth + 1), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** A URL fit for the record and logs: no credentials, no query. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    parsed.search = '';
    return parsed.toString().replace(/\/+$/, '');
  } catch {
    return '(invalid url)';
  }
}

/**
 * A command line fit for the store and logs: `--api-key VALUE` / `--token=VALUE` / `--password VALUE`
 * values, header words (`x-api-key: VALUE`) and key-shaped words redacted.
 */
export function scrubArgv(argv: readonly string[]): string[] {
  return argv.map((arg, i) => {
    const flag = /^--?([A-Za-z0-9_-]+)=(.*)$/s.exec(arg);
    if (flag && isCredentialKey(flag[1]!)) return `${arg.slice(0, arg.indexOf('=') + 1)}[redacted]`;
    const previous = /^--?([A-Za-z0-9_-]+)$/.exec(argv[i - 1] ?? '');
    if (previous && isCredentialKey(previous[1]!)) return '[redacted]';
    return scrubMessage(arg);
  });
}

/** Longest span name and status message kept (OTLP names over 1024 characters are refused before this). */
const MAX_NAME_CHARS = 1024;
const MAX_MESSAGE_CHARS = 64 * 1024;

function capText(text: string, max: number): string {
  return scrubMessage(text.length > max ? `${text.slice(0, max)}…[lightning: truncated ${text.length - max} characters]` : text);
}

/**
 * A span fit for the store, whoever made it (proxy, OTLP, RPC `spans/add`): every free-text field
 * scrubbed (name, status message, event names, attributes at any depth), and the whole span cut to
 * RECORD_LIMITS with one budget for its attributes and events.
 */
export function scrubSpan(span: SpanInput): SpanInput {
  const budget = recordBudget();
  const attributes = scrubSecrets(span.attributes, budget) as SpanInput['attributes'];
  const events = span.events.map((event) => ({ ...event, name: capText(event.name, MAX_NAME_CHARS), attributes: scrubSecrets(event.attributes, budget) as SpanInput['attributes'] }));
  return {
    ...span,
    name: capText(span.name, MAX_NAME_CHARS),
    statusMessage: span.statusMessage === null ? null : capText(span.statusMessage, MAX_MESSAGE_CHARS),
    // A call whose record was cut is not the whole exchange: training leaves it out (protocol/outcome.ts).
    attributes: budget.cut && span.category === 'llm' ? markTruncated(attributes, budget.cut) : attributes,
    events,
  };
}
