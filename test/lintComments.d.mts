// Types of lintComments.mjs (plain JavaScript: test/lint.mjs runs it without tsx).
export const WIDTH: number;
export function longCommentLines(root: string, files: readonly string[]): string[];
