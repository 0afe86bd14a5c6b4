/**
 * The one place that decides what a secret is. Everything stored or logged — proxy records, OTLP
 * spans, rewards and their comments, command lines, upstream URLs, log fields, exports — goes
 * through here. Secrets are found by VALUE, never by the name of the field that holds them: the
 * exact keys the daemon knows (its own token, the upstream keys it was given, and each rollout's —
 * the values of the credential headers and `?key=` its agent sent, its upstreams' credentials, its
 * capability key) and the shapes of well-known keys (`sk-…`, `AIza…`, `ghp_…`, JWTs …) are
 * redacted wherever they appear. Model content — messages, tool schemas, tool arguments, logprobs —
 * is therefore kept byte for byte unless it holds such a value. Names decide only where the field IS
 * a credential by definition: an HTTP header (`authorization`, `x-api-key`, recorded as
 * `http.request.header.*` span attributes), a URL's query credential (`?key=`), a command-line flag
 * (`--api-key`), an environment variable, a log field.
 */
import type { Json, SpanInput } from './records';
import { markTruncated } from './outcome';
import type { TruncationLimit } from './outcomeSchema';
import { PLACEHOLDER_API_KEY } from './agentEnv';

const CREDENTIAL_WORDS = new Set([
  'authorization',
  'password',
  'passwd',
  'secret',
  'secrets',
  'cookie',
  'cookies',
  'apikey',
  'credential',
  'credentials',
]);
/** `token` is a credential (`access_token`, `x-auth-token`) except where it counts or lists tokens. */
const TOKEN_ACCOUNTING_WORDS = new Set(['count', 'counts', 'ids', 'id', 'logprobs', 'usage', 'type', 'limit']);

/**
 * Shapes of provider API keys and bearer tokens. Each is specific enough that ordinary text (model
 * answers, code, logprobs' token strings) does not match: a prefix that words do not start with,
 * and a random-looking body (a bare `sk-` or `Bearer` body must hold a digit, or be very long).
 */
const SECRET_SHAPES: readonly RegExp[] = [
  /\bBearer\s+[A-Za-z0-9._~+/-]{16,}=*/g,
  /\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}/g,
  /\bAIza[0-9A-Za-z_-]{30,}/g,
  /\bgh[pousr]_[A-Za-z0-9]{30,}/g,
  /\bgithub_pat_[A-Za-z0-9_]{30,}/g,
  /\bglpat-[A-Za-z0-9_-]{20,}/g,
  /\bxox[abposr]-[A-Za-z0-9-]{10,}/g,
  /\bhf_[A-Za-z0-9]{30,}/g,
  /\bgsk_[A-Za-z0-9]{20,}/g,
  /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g,
  /\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}/g,
  /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----/g,
];
/** Cheap test before the shapes run: most strings hold none of these. */
const SHAPE_HINT =
  /sk-|Bearer|AIza|gh[pousr]_|github_pat_|glpat-|xox|hf_|gsk_|AKIA|ASIA|k_live_|k_test_|eyJ|PRIVATE KEY/;

/** Whether a matched `sk-…` / `Bearer …` is a key, not a hyphenated word: a provider's key prefix (`sk-proj-`, `sk-ant-` …), or a random-looking body (a digit in it, or long). */
function looksRandom(match: string): boolean {
  if (/^sk-(?:ant|proj|svcacct|admin)-/.test(match)) return true;
  const body = match.replace(/^(?:sk-|Bearer\s+)/, '');
  return /\d/.test(body) || body.length >= 40;
}

/**
 * A rollout's capability URL path (`/r/<key>`, a worker batch's `/b/<key>`): whoever reads it could write into that
 * rollout; a policy server's (`/p/<key>`, python/lightning_trainer/serve.py) would let them generate.
 */
const CAPABILITY_PATH = /\/([rbp])\/[A-Za-z0-9_-]{32}(?![A-Za-z0-9_-])/g;
/** Credentials in a URL query (`?key=AIza…`, `&api_key=…`). */
const QUERY_SECRET = /([?&](?:key|api[-_]?key|access[-_]?token|token|sig|signature|auth|password)=)[^&#\s"']+/gi;
const QUERY_SECRET_NAME = /^(?:key|api[-_]?key|access[-_]?token|token|sig|signature|auth|password)$/i;

const known = new Map<string, boolean>();

/**
 * Whether a field name names a credential — used only where the field is one by definition (an HTTP
 * header's name, a command-line flag, an environment variable, a log field), never inside recorded
 * bodies or attributes. Names are split into words (separators and camelCase) so that
 * `llm.token_count.prompt` stays while `x-api-key`, `apiKey`, `authorization` and `auth_token` go.
 * Results are remembered (names repeat).
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
  const words = key
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
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
  if (
    isCredentialKey(name) ||
    name
      .toLowerCase()
      .split(/[^a-z0-9]+/)
      .some((word) => ENV_CREDENTIAL_WORDS.has(word))
  )
    return true;
  // A variable's value is no model text: any `sk-…`/`Bearer …` word counts, random-looking or not.
  if (
    scrubText(value) !== value ||
    scrubUrlCredentials(value) !== value ||
    /\b(?:sk-[A-Za-z0-9_-]{16,}|Bearer\s+\S{16,})/.test(value)
  )
    return true;
  return /^[a-z][a-z0-9+.-]*:\/\/[^/@\s]*:[^/@\s]+@/i.test(value);
}

// ---------------------------------------------------------------------------------------------
// The exact values known to be secrets

/** Shorter values are too common to redact verbatim wherever they appear. */
const MIN_SECRET_CHARS = 8;
/** Values that go where credentials go but are none: the placeholder key agents are given. */
const NOT_SECRETS: ReadonlySet<string> = new Set([PLACEHOLDER_API_KEY, `Bearer ${PLACEHOLDER_API_KEY}`]);

/**
 * Exact secret values this process knows (the daemon's upstream key and RPC token, a judge's key):
 * redacted wherever they appear, whatever their shape — an upstream that echoes the key in an
 * error must not get it stored.
 */
const knownSecrets = new Set<string>();

/** Registers a secret value to redact verbatim in every record of this process. */
export function registerSecretValue(value: string | undefined): void {
  if (value && value.length >= MIN_SECRET_CHARS && !NOT_SECRETS.has(value) && !knownSecrets.has(value)) {
    knownSecrets.add(value);
    processSecrets = undefined;
  }
}

/** knownSecrets as scrubText takes them (longest first), rebuilt when one is registered. */
let processSecrets: readonly string[] | undefined;

/** Each rollout's own secret values, newest rollouts last; bounded in rollouts and in values per rollout. */
const rolloutSecrets = new Map<string, Set<string>>();
const MAX_ROLLOUTS_REMEMBERED = 10_000;
const MAX_SECRETS_PER_ROLLOUT = 32;

/**
 * Remembers values as secrets of one rollout (its agent's credential headers and `?key=`, its
 * upstreams' credentials, its capability key): whatever of that rollout is stored later — a body
 * that echoes them, a reward comment, an OTLP attribute — has them redacted.
 */
export function rememberRolloutSecrets(rolloutId: string, values: Iterable<string | undefined>): void {
  let set = rolloutSecrets.get(rolloutId);
  for (const value of values) {
    if (!value || value.length < MIN_SECRET_CHARS || NOT_SECRETS.has(value) || knownSecrets.has(value)) continue;
    if (!set) {
      set = new Set();
      rolloutSecrets.set(rolloutId, set);
      if (rolloutSecrets.size > MAX_ROLLOUTS_REMEMBERED) rolloutSecrets.delete(rolloutSecrets.keys().next().value!);
    }
    if (set.size < MAX_SECRETS_PER_ROLLOUT) set.add(value);
  }
}

/** The exact values to redact in a record: the process's and (with a rollout) that rollout's, longest first. */
export function secretsOf(rolloutId?: string | null): readonly string[] {
  processSecrets ??= [...knownSecrets].sort((a, b) => b.length - a.length);
  const own = rolloutId ? rolloutSecrets.get(rolloutId) : undefined;
  if (!own) return processSecrets;
  // Asked for each span stored: the sorted list is kept until either set changes.
  let sorted = rolloutSecretLists.get(own);
  if (sorted?.process !== processSecrets || sorted.size !== own.size) {
    sorted = {
      process: processSecrets,
      size: own.size,
      list: [...processSecrets, ...own].sort((a, b) => b.length - a.length),
    };
    rolloutSecretLists.set(own, sorted);
  }
  return sorted.list;
}
/** secretsOf's sorted lists, by the rollout's set (a set only grows; processSecrets is replaced when it changes). */
const rolloutSecretLists = new WeakMap<
  ReadonlySet<string>,
  { process: readonly string[]; size: number; list: readonly string[] }
>();

/** The names of the headers that carry credentials, whatever the rest of the name (`x-api-key`, `authorization`, `cookie` …). */
export function isCredentialHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return (
    lower === 'set-cookie' ||
    lower === 'x-goog-api-key' ||
    lower === 'api-key' ||
    lower === 'x-lightning-rollout-key' ||
    isCredentialKey(lower)
  );
}

/** The secret values in one credential header's value: the whole value, the token after `Bearer`/`Basic`, a Basic password, each cookie's value. */
function headerSecretValues(name: string, value: string): string[] {
  const values = [value.trim()];
  const scheme = /^\s*(Bearer|Basic|Token|Key)\s+(\S+)\s*$/i.exec(value);
  if (scheme) {
    values.push(scheme[2]!);
    if (scheme[1]!.toLowerCase() === 'basic') {
      let decoded = '';
      try {
        decoded = atob(scheme[2]!);
      } catch {
        // Not base64: the whole token is remembered already.
      }
      const colon = decoded.indexOf(':');
      if (colon > 0) values.push(decoded.slice(colon + 1));
    }
  }
  if (/cookie/i.test(name))
    for (const pair of value.split(/;\s*/))
      values.push(
        pair
          .slice(pair.indexOf('=') + 1)
          .split(';')[0]!
          .trim(),
      );
  return values;
}

/**
 * The secret values an HTTP request carries in its credential headers and its query's credential
 * parameters (`?key=`): what the daemon remembers for the rollout that request belongs to.
 */
export function requestSecretValues(
  headers: Readonly<Record<string, string | string[] | undefined>>,
  search = '',
): string[] {
  const values: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || !isCredentialHeader(name)) continue;
    for (const one of Array.isArray(value) ? value : [value]) values.push(...headerSecretValues(name, one));
  }
  if (search)
    for (const [name, value] of new URLSearchParams(search)) if (QUERY_SECRET_NAME.test(name)) values.push(value);
  return values.filter((value) => value.length >= MIN_SECRET_CHARS && !NOT_SECRETS.has(value));
}

/**
 * The secret parts of a URL, e.g. of a rollout's upstream: its password (or, without one, its user
 * name, where gateways take a key: `https://KEY@host`) and its query's credential parameters.
 */
export function urlSecretValues(url: string): string[] {
  try {
    const parsed = new URL(url);
    const values = [decodeURIComponent(parsed.password || parsed.username)];
    for (const [name, value] of parsed.searchParams) if (QUERY_SECRET_NAME.test(name)) values.push(value);
    return values.filter((value) => value.length >= MIN_SECRET_CHARS);
  } catch {
    return [];
  }
}

// ---------------------------------------------------------------------------------------------
// Redacting

const REDACTED = '[redacted]';

/**
 * Text with every secret value redacted: the exact values given (default: the process's), the
 * well-known key shapes, and capability URL paths. Nothing else changes, so model text stays as it was.
 */
export function scrubText(text: string, secrets: readonly string[] = secretsOf()): string {
  // A capability path first, so that its key (a remembered secret too) reads `/r/…` in a URL.
  if (text.includes('/r/') || text.includes('/b/') || text.includes('/p/'))
    text = text.replace(CAPABILITY_PATH, '/$1/…');
  for (const secret of secrets) if (text.includes(secret)) text = text.split(secret).join(REDACTED);
  if (!SHAPE_HINT.test(text)) return text;
  for (const shape of SECRET_SHAPES) {
    shape.lastIndex = 0;
    if (shape.test(text)) {
      shape.lastIndex = 0;
      text = text.replace(shape, (match) =>
        match.startsWith('sk-') || match.startsWith('Bearer') ? (looksRandom(match) ? REDACTED : match) : REDACTED,
      );
    }
  }
  return text;
}

/** A URL's credentials (the query's `key=`/`token=`… values, a password) redacted, then its secret values as in scrubText. */
export function scrubUrlCredentials(text: string, secrets: readonly string[] = secretsOf()): string {
  // Each pattern needs a character most text lacks: checked first, as this runs on every span name.
  if (text.includes('=')) text = text.replace(QUERY_SECRET, `$1${REDACTED}`);
  if (text.includes('@')) text = text.replace(/(\b[a-z][a-z0-9+.-]*:\/\/[^/@\s:]*:)[^/@\s]+@/gi, `$1${REDACTED}@`);
  return scrubText(text, secrets);
}

/** `name: VALUE` / `name=VALUE` where the name is a credential's (`x-api-key: …`, `password=…`). */
const NAMED_VALUE = /([A-Za-z][A-Za-z0-9_.-]*)(\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&"']+)/g;

/**
 * Free text of our own or an error's (error messages, status messages, span and event names, argv
 * words, log lines), which may quote headers or URLs: secret values as in `scrubText`, URL query
 * credentials, and the value after any credential-named `name:`/`name=`. Never used on model content.
 */
export function scrubMessage(text: string, secrets: readonly string[] = secretsOf()): string {
  const scrubbed = scrubUrlCredentials(text, secrets);
  if (!/key|token|pass|secret|auth|cookie|credential/i.test(scrubbed)) return scrubbed;
  return scrubbed.replace(NAMED_VALUE, (whole, name: string, separator: string) =>
    isCredentialKey(name) ? `${name}${separator}${REDACTED}` : whole,
  );
}

/**
 * A JSON value with every string scrubbed by value (scrubText), nothing else changed: keys, numbers
 * and structure stay. Returns the same object when nothing was redacted. For records read back out
 * (exports) and rewards; the store's spans go through scrubSpan.
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

// ---------------------------------------------------------------------------------------------
// Records

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
  /** The exact secret values to redact (secretsOf); default the process's. */
  secrets?: readonly string[];
}

export function recordBudget(secrets?: readonly string[]): RecordBudget {
  return { left: RECORD_LIMITS.maxRecordChars, secrets };
}

function capString(text: string, budget: RecordBudget): string {
  const limit = Math.max(0, Math.min(RECORD_LIMITS.maxStringChars, budget.left));
  const kept =
    text.length > limit ? `${text.slice(0, limit)}…[lightning: truncated ${text.length - limit} characters]` : text;
  if (text.length > limit) budget.cut ??= limit === RECORD_LIMITS.maxStringChars ? 'string_chars' : 'record_chars';
  budget.left -= Math.min(text.length, limit);
  // Scrubbed after the cut: a regex over a 100 MB string is the cost being avoided.
  return scrubText(kept, budget.secrets);
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

/** A URL fit for the record and logs: no credentials, no query. */
export function redactUrl(url: string): string {
  // Every proxied call records its upstream's: the few upstreams a daemon talks to are parsed once each.
  let redacted = redactedUrls.get(url);
  if (redacted !== undefined) return redacted;
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    parsed.search = '';
    redacted = parsed.toString().replace(/\/+$/, '');
  } catch {
    redacted = '(invalid url)';
  }
  redactedUrls.set(url, redacted);
  if (redactedUrls.size > 1_000) redactedUrls.delete(redactedUrls.keys().next().value!);
  return redacted;
}
const redactedUrls = new Map<string, string>();

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

function capText(text: string, max: number, secrets: readonly string[]): string {
  return scrubMessage(
    text.length > max ? `${text.slice(0, max)}…[lightning: truncated ${text.length - max} characters]` : text,
    secrets,
  );
}

/** A span attribute that records an HTTP header (`http.request.header.authorization`, OTel's convention), by the header's name. */
const HEADER_ATTRIBUTE = /^(?:http\.(?:request|response)\.header\.)(.+)$/i;

/** Whether a span attribute IS a credential header (its whole value is a credential), not content that may mention one. */
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

/** Whether a span attribute is a URL or a URL's query (`url.full`, `http.url`, `url.query`), whose query credentials are redacted. */
function isUrlAttribute(key: string, value: Json): value is string {
  return (
    typeof value === 'string' &&
    (key === 'url.query' || (value.includes('://') && /^[a-z][a-z0-9+.-]*:\/\/\S+$/i.test(value)))
  );
}

/** The credential values a span's own header and URL attributes carry (what scrubSpan redacts there, and then everywhere in the span). */
function spanHeaderSecrets(span: SpanInput): string[] {
  const values: string[] = [];
  const collect = (attributes: SpanInput['attributes']): void => {
    for (const [key, value] of Object.entries(attributes)) {
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
  };
  collect(span.attributes);
  for (const event of span.events) collect(event.attributes);
  return values.filter((value) => value.length >= MIN_SECRET_CHARS && !NOT_SECRETS.has(value));
}

/** A span's (or event's) attributes: credential headers redacted whole, URLs' query credentials, and every value scrubbed. */
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
  const secrets =
    found.length > 0
      ? [...new Set([...secretsOf(rolloutId), ...found])].sort((a, b) => b.length - a.length)
      : secretsOf(rolloutId);
  const budget = recordBudget(secrets);
  const attributes = scrubAttributes(span.attributes, budget);
  const events = span.events.map((event) => ({
    ...event,
    name: capText(event.name, MAX_NAME_CHARS, secrets),
    attributes: scrubAttributes(event.attributes, budget),
  }));
  return {
    ...span,
    name: capText(span.name, MAX_NAME_CHARS, secrets),
    statusMessage: span.statusMessage === null ? null : capText(span.statusMessage, MAX_MESSAGE_CHARS, secrets),
    // A call whose record was cut is not the whole exchange: training leaves it out (protocol/outcome.ts).
    attributes: budget.cut && span.category === 'llm' ? markTruncated(attributes, budget.cut) : attributes,
    events,
  };
}
