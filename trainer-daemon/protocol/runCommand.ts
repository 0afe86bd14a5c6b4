/**
 * The agent command a training run runs its rollouts with (GRPO's and APO's `config.command`), and the variables a
 * run may be started with for its agents without storing them (`training/start`'s `env`).
 */
import { z } from 'zod';
import { isSecretVariable } from './secrets';

const VariableName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'not a variable name');

export const RunCommand = z.strictObject({
  argv: z.array(z.string()).min(1, 'command.argv: give the agent command after --'),
  cwd: z.string(),
  /**
   * Variables added to the agents' environment (a launch configuration's `env`). Stored with the run, so secrets
   * (by name or by value: secrets.ts) are refused: those belong in the daemon's environment, or in `training/start`'s
   * `env`, which is never stored.
   */
  env: z
    .record(VariableName, z.string())
    .superRefine((env, ctx) => {
      const secret = Object.entries(env)
        .filter(([name, value]) => isSecretVariable(name, value))
        .map(([name]) => name);
      if (secret.length > 0)
        ctx.addIssue({
          code: 'custom',
          message: `secrets are not stored with a run: set ${secret.join(', ')} in the environment the daemon starts with`,
        });
    })
    .optional(),
});
export type RunCommand = z.infer<typeof RunCommand>;

/**
 * Variables for the agents of the run being started (and, for APO, its own LLM calls: `OPENAI_API_KEY`), laid over
 * the daemon's environment and the configuration's `command.env` for as long as this start runs; null unsets one.
 * Held in the daemon's memory only, never stored, so secrets may be among them (their values are redacted wherever
 * they turn up). `lightning train --algorithm apo` sends its own environment; the editor a launch configuration's.
 */
export const StartEnv = z.record(VariableName, z.string().max(1_000_000).nullable());
export type StartEnv = z.infer<typeof StartEnv>;
