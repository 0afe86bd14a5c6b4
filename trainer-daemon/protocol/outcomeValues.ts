/** The size limits a record can be cut at (docs/guarantees.md), as plain values: zod-free, for the webview too. */
export const TRUNCATION_LIMITS = [
  'stream_content',
  'record_chars',
  'string_chars',
  'depth',
  'response_body',
  'sse_event',
  'rollout_ended',
] as const;
