import assert from 'node:assert/strict';
import { RolloutDetail } from '../../trainer-daemon/protocol';
import { runCli } from './daemon';
import { tempDir } from './tmp';

export interface AgentRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** The `rollout-finished` line `lightning run` printed last on stderr. */
  readonly last: { event: string; id: string; status: string; reward: number | null };
  readonly cwd: string;
  /** The rollout as `lightning show --json` reports it. */
  readonly detail: RolloutDetail;
}

/** Runs `lightning run --label capture-test … -- CMD` in a fresh folder against `upstreamUrl`, and reads back the rollout. */
export async function runAgent(
  t: Parameters<typeof tempDir>[0],
  upstreamUrl: string,
  command: string[],
  env: NodeJS.ProcessEnv = {},
  extra: string[] = [],
): Promise<AgentRun> {
  const cwd = tempDir(t);
  const result = await runCli(['run', '--label', 'capture-test', ...extra, '--', ...command], {
    cwd,
    env: {
      LIGHTNING_UPSTREAM_URL: upstreamUrl,
      OPENAI_BASE_URL: '',
      OPENAI_API_BASE: '',
      OPENAI_AGENTS_DISABLE_TRACING: '1',
      ...env,
    },
  });
  const last = JSON.parse(result.stderr.trim().split('\n').at(-1)!) as AgentRun['last'];
  const shown = await runCli(['show', last.id, '--json'], { cwd });
  assert.equal(shown.code, 0, shown.stderr);
  return { ...result, last, cwd, detail: RolloutDetail.parse(JSON.parse(shown.stdout)) };
}
