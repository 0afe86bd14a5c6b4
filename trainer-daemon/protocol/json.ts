/**
 * JSON values, shared by every room and the webview (no zod here: schemas are in records.ts), and how one reads
 * as text in a summary or a message: a string as it is, anything else as its JSON, never "[object Object]".
 */

/** A JSON value (task inputs, span attributes, resource values, configs). */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/**
 * `value` as text: a string unchanged, a number or boolean as written, an object or array as JSON; undefined and null
 * give `fallback`.
 */
export function textOf(value: unknown, fallback = ''): string {
  if (value === undefined || value === null) return fallback;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  return JSON.stringify(value) ?? fallback;
}

/** Whether `value` is a JSON object: not null, not an array (the one check every reader of recorded JSON makes). */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `value` when it is a JSON object, else undefined: for chained reads (`asJsonObject(x)?.field`). */
export function asJsonObject(value: Json | undefined): JsonObject | undefined {
  return isJsonObject(value) ? value : undefined;
}

/** `value` when it is an array, else an empty one. */
export function jsonList(value: Json | undefined): Json[] {
  return Array.isArray(value) ? value : [];
}

/** `value` when it is a string, else ''. */
export function jsonString(value: Json | undefined): string {
  return typeof value === 'string' ? value : '';
}
