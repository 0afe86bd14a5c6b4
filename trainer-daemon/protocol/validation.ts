import type { z } from 'zod';

/**
 * One line per problem, each naming the field: `params.value: Invalid input: expected number, received string`.
 * Used wherever data enters a process, so every boundary reports bad input the same way.
 */
export function describeIssues(error: z.ZodError, root: string): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => {
      const path = [root, ...issue.path.map(String)].filter(Boolean).join('.');
      return `${path || 'value'}: ${issue.message}`;
    })
    .join('; ');
}
