/** A dataset as `datasets/import` takes it: its tasks, each with its split, input and expected answer. */
import { z } from 'zod';
import { Json } from './records';

export const ImportTask = z.object({
  id: z.string().min(1).max(512),
  split: z.enum(['train', 'val', 'test']),
  input: Json,
  expected: Json.nullable(),
});
export type ImportTask = z.infer<typeof ImportTask>;

export const ImportDatasetParams = z.strictObject({
  name: z.string().min(1).max(200),
  /** Where the tasks came from (a file path), for people. */
  source: z.string().max(4096).nullable().default(null),
  tasks: z
    .array(ImportTask)
    .min(1)
    .max(1_000_000)
    .superRefine((tasks, context) => {
      // Caught here (-32602 naming the task), not as a UNIQUE violation inside the store (-32603).
      const seen = new Map<string, number>();
      tasks.forEach((task, index) => {
        const first = seen.get(task.id);
        if (first !== undefined)
          context.addIssue({
            code: 'custom',
            path: [index, 'id'],
            message: `task id ${JSON.stringify(task.id.slice(0, 100))} repeats task ${first}'s; task ids must be unique`,
          });
        else seen.set(task.id, index);
      });
    }),
});
export type ImportDatasetParams = z.input<typeof ImportDatasetParams>;
