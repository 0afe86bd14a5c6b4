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
 * (`--api-key`), an environment variable, a log field. A record is walked, scrubbed and cut to size in
 * recordScrub.ts, with what this file says.
 */
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

/**
 * Whether a matched `sk-…` / `Bearer …` is a key, not a hyphenated word: a provider's key prefix (`sk-proj-`, `sk-ant-`
 * …), or a random-looking body (a digit in it, or long).
 */
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

/**
 * Words that make an environment variable's name a credential's (`GITHUB_TOKEN`, `DB_PWD`, `LLM_AUTH`, `SIGNING_KEY`).
 */
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

/** Whether a value is one to redact verbatim: long enough to be no common word, and not the placeholder key. */
export function isSecretValue(value: string): boolean {
  return value.length >= MIN_SECRET_CHARS && !NOT_SECRETS.has(value);
}

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

/**
 * The names of the headers that carry credentials, whatever the rest of the name (`x-api-key`, `authorization`,
 * `cookie` …).
 */
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

/**
 * The secret values in one credential header's value: the whole value, the token after `Bearer`/`Basic`, a Basic
 * password, each cookie's value.
 */
export function headerSecretValues(name: string, value: string): string[] {
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
  return values.filter(isSecretValue);
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

export const REDACTED = '[redacted]';

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

/**
 * A URL's credentials (the query's `key=`/`token=`… values, a password) redacted, then its secret values as in
 * scrubText.
 */
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
