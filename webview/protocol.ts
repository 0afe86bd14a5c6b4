/**
 * Messages between the side-panel webview and the extension (postMessage), as zod schemas. Both
 * ends import this module; each validates what it receives with `safeParse`.
 */
import { z } from 'zod';

export const WebviewToExtension = z.discriminatedUnion('type', [z.object({ type: z.literal('ready') })]);
export type WebviewToExtension = z.infer<typeof WebviewToExtension>;

export const ExtensionToWebview = z.discriminatedUnion('type', [
  z.object({ type: z.literal('daemonState'), state: z.enum(['starting', 'running', 'stopped', 'failed']) }),
]);
export type ExtensionToWebview = z.infer<typeof ExtensionToWebview>;
