/**
 * The one place that decides what a secret looks like. Everything stored or logged — proxy
 * records, OTLP spans, command lines, upstream URLs, log fields — goes through here: credential-
 * named fields are dropped, key-shaped strings and per-rollout capability URLs are redacted.
 */
import type { Json } from './records';

const CREDENTIAL_WORDS = new Set(['authorization', 'password', 'passwd', 'secret', 'secrets', 'cookie', 'cookies', 'apikey', 'credential', 'credentials']);
/** `token` is a credential (`access_token`, `x-auth-token`) except where it counts or lists tokens. */
const TOKEN_ACCOUNTING_WORDS = new Set(['count', 'counts', 'ids', 'id', 'logprobs', 'usage', 'type', 'limit']);

/** Shapes of provider API keys and bearer tokens, wherever they hide. */
const SECRET_VALUE = /\b(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|Bearer\s+[A-Za-z0-9._~+/-]{16,}=*|AIza[0-9A-Za-z_-]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abpors]-[A-Za-z0-9-]{10,})/g;
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

export function scrubText(text: string): string {
  if (!/sk-|Bearer|AIza|gh[pousr]_|xox|\/r\/|[?&]/.test(text)) return text;
  return text.replace(SECRET_VALUE, '[redacted]').replace(CAPABILITY_PATH, '/r/…').replace(QUERY_SECRET, '$1[redacted]');
}

/** A JSON value with credential-named fields dropped (at any depth) and secret-looking strings redacted. */
export function scrubSecrets(value: Json): Json {
  if (typeof value === 'string') return scrubText(value);
  if (Array.isArray(value)) return value.map(scrubSecrets);
  if (value !== null && typeof value === 'object') {
    const out: { [key: string]: Json } = {};
    for (const [key, inner] of Object.entries(value)) {
      if (isCredentialKey(key)) continue;
      Object.defineProperty(out, key, { value: scrubSecrets(inner), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
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

/** A command line fit for the store: `--api-key VALUE` / `--token=VALUE` values and key-shaped words redacted. */
export function scrubArgv(argv: readonly string[]): string[] {
  return argv.map((arg, i) => {
    const flag = /^--?([A-Za-z0-9_-]+)=(.*)$/.exec(arg);
    if (flag && isCredentialKey(flag[1]!)) return `${arg.slice(0, arg.indexOf('=') + 1)}[redacted]`;
    const previous = /^--?([A-Za-z0-9_-]+)$/.exec(argv[i - 1] ?? '');
    if (previous && isCredentialKey(previous[1]!)) return '[redacted]';
    return scrubText(arg);
  });
}
