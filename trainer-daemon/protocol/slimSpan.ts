/**
 * What a tab needs of a span before it is selected, pure: the timeline needs its timing, name,
 * kind, tokens and status; the comparison its last input turn and its answer. A long conversation
 * resent with every call makes a 2,000-call rollout's recorded requests grow with the square of its
 * length (hundreds of MB), and copying that into a webview costs seconds. So the extension posts
 * spans slimmed: message lists cut to the system prompt and the last turns, long strings cut,
 * marked `lightning.slim`; the tab asks for the whole span when it shows its conversation. The daemon
 * slims them (`spans/list` with `slim: true`), so the long ones never cross the WebSocket either.
 */
import type { Json, JsonObject, Span } from './records';

export const SLIM_ATTRIBUTE = 'lightning.slim';
/** Message lists keep their first (system) turn and this many last ones. */
const LAST_TURNS = 3;
const MAX_STRING = 4_000;
const MESSAGE_LISTS = new Set(['messages', 'contents', 'input']);

interface Cut {
  cut: boolean;
}

function slimJson(value: Json, cut: Cut, depth: number, key?: string): Json {
  if (typeof value === 'string') {
    if (value.length <= MAX_STRING) return value;
    cut.cut = true;
    return `${value.slice(0, MAX_STRING)}…`;
  }
  if (value === null || typeof value !== 'object') return value;
  if (depth > 12) {
    cut.cut = true;
    return null;
  }
  if (Array.isArray(value)) {
    let items = value;
    if (key !== undefined && MESSAGE_LISTS.has(key) && value.length > LAST_TURNS + 1) {
      cut.cut = true;
      items = [value[0]!, ...value.slice(-LAST_TURNS)];
    }
    return items.map((item) => slimJson(item, cut, depth + 1));
  }
  const out: JsonObject = {};
  for (const [name, item] of Object.entries(value)) out[name] = slimJson(item, cut, depth + 1, name);
  return out;
}

/** The span with its recorded request and response slimmed (marked when anything was cut); unchanged otherwise. */
export function slimSpan(span: Span): Span {
  const cut: Cut = { cut: false };
  const attributes: Record<string, Json> = {};
  for (const [name, value] of Object.entries(span.attributes)) attributes[name] = slimJson(value, cut, 0);
  if (!cut.cut) return span;
  attributes[SLIM_ATTRIBUTE] = true;
  return { ...span, attributes };
}

export function isSlim(span: Span): boolean {
  return span.attributes[SLIM_ATTRIBUTE] === true;
}
