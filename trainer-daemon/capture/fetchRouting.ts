/**
 * What is preloaded into the Node processes of a rollout (`NODE_OPTIONS=--require …/dist/capture-preload.js`, set by
 * `lightning run`, `dataset run` and Debug with Lightning through protocol/agentEnv.ts): a `fetch` to a
 * provider's own host goes to the rollout URL ($LIGHTNING_URL) instead, whose proxy records the call and
 * forwards it to the rollout's upstream for that API. It catches the SDKs that read no base-URL variable
 * (`@ai-sdk/google`) and base URLs written into an agent's code. Only the paths the proxy serves on those
 * hosts are rerouted; the request — method, headers, body (a stream too), signal — is sent unchanged, and
 * every other request is untouched. Bundled on its own and importing nothing: it runs in every Node
 * process the agent starts.
 */

/** The providers' public hosts, and which of their paths the rollout URL serves (capture/agentRoutes.ts). */
const ROUTED: Readonly<Record<string, RegExp>> = {
  'api.openai.com': /^\/v1\/(?:chat\/completions|completions|responses|embeddings|models)$/,
  'api.anthropic.com': /^\/v1\/(?:messages|models)(?:\/|$)/,
  'generativelanguage.googleapis.com': /^\/v1(?:beta|alpha)\/models\//,
};

/** The rollout URL for a request to `url`, or null when the request is not one to reroute. */
export function reroutedUrl(url: string, lightningUrl: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const paths = ROUTED[parsed.hostname];
  if (parsed.protocol !== 'https:' || parsed.port !== '' || parsed.username !== '' || !paths?.test(parsed.pathname))
    return null;
  return `${lightningUrl.replace(/\/+$/, '')}${parsed.pathname}${parsed.search}`;
}

const INSTALLED = Symbol.for('lightning.capturePreload');

type Fetch = typeof globalThis.fetch;

/** Wraps `globalThis.fetch` once per process; a process without LIGHTNING_URL (or without fetch) is left as it is. */
export function installFetchRouting(
  scope: { fetch?: Fetch; [INSTALLED]?: true } = globalThis,
  lightningUrl = process.env.LIGHTNING_URL,
): void {
  const original = scope.fetch;
  if (!lightningUrl || typeof original !== 'function' || scope[INSTALLED]) return;
  const routed: Fetch = (input, init) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const target = reroutedUrl(url, lightningUrl);
    if (target === null) return original(input, init);
    // A Request keeps its method, headers, body and signal when it is rebuilt for the new URL.
    return typeof input === 'string' || input instanceof URL
      ? original(target, init)
      : original(new Request(target, input), init);
  };
  scope.fetch = routed;
  scope[INSTALLED] = true;
}
