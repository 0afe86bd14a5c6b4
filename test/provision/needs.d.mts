// Types of needs.mjs (plain JavaScript: test/run.mjs runs it before tsx is involved).
export const NEEDS: Record<'torch' | 'venv' | 'ray' | 'node24' | 'unzip' | 'root' | 'editor', string>;
export function needsOf(file: string): Set<string>;
export function torchShim(dir: string): string;
