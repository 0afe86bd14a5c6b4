import path from 'node:path';
import { DEFAULT_STORE } from '../../trainer-daemon/cli/options';
import { RolloutDetail } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
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

/**
 * Runs `lightning run --label capture-test … -- CMD` in a fresh folder against `upstreamUrl`, and reads back the
 * rollout.
 */
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
  return {
    ...result,
    last,
    cwd,
    detail: storedDetail(
      path.resolve(cwd, env.LIGHTNING_STORE ?? process.env.LIGHTNING_STORE ?? DEFAULT_STORE),
      last.id,
    ),
  };
}

/**
 * The rollout as the store holds it once `lightning run` has ended (its daemon stopped with it): what
 * `lightning show --json` prints (the same store call, through the same schema), read here rather than in a CLI
 * process of its own for each run (~0.4 s of CPU each; `show` has its tests in cli.test.ts).
 */
function storedDetail(storeFile: string, id: string): RolloutDetail {
  const store = Store.open(storeFile, { readonly: true });
  try {
    return RolloutDetail.parse(JSON.parse(JSON.stringify(store.getRolloutDetail(id, { spanLimit: 10_000 }))));
  } finally {
    store.close();
  }
}
