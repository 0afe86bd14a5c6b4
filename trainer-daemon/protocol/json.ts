/**
 * JSON values, shared by every room and the webview (no zod here: schemas are in records.ts), and how one reads
 * as text in a summary or a message: a string as it is, anything else as its JSON, never "[object Object]".
 */

/** A JSON value (task inputs, span attributes, resource values, configs). */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** `value` as text: a string unchanged, a number or boolean as written, an object or array as JSON; undefined and null give `fallback`. */
export function textOf(value: unknown, fallback = ''): string {
  if (value === undefined || value === null) return fallback;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  return JSON.stringify(value) ?? fallback;
}
