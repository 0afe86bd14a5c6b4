// Types of index.mjs (plain JavaScript: test/run.mjs runs it before tsx is involved).
export const REPO: string;
export const CACHE: string;
export const PYTHON_REQUIREMENTS: string;
export class ProvisionError extends Error {}
export interface AptNeed {
  readonly name: string;
  readonly why: string;
}
export function ensureApt(needs: readonly AptNeed[]): void;
export function ensurePythonVenv(): string;
export function ensureNode(major: number): { node: string; bin: string; headers: string };
export function ensureBrowserDriver(): string;
export function ensurePortkeyGateway(): string;
export const EDITORS: Record<'oldest' | 'current', { codeServer: string; vscode: string; nodeMajor: number | undefined }>;
export function ensureEditor(which: 'oldest' | 'current'): { codeServer: string; node: string; env: { PATH: string } };
