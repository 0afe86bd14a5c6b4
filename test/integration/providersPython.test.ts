// needs: venv
/**
 * Agents on the Python SDK `anthropic` (LIGHTNING_TEST_PYTHON), unchanged,
 * through `lightning run`: the same trajectories as the JS SDKs' (providers.test.ts).
 */
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import {
  AGENTS,
  ANTHROPIC_KEY,
  anthropicEnv,
  assertAnthropicTrajectory,
  assertNotStored,
  python,
} from '../helpers/providerAgents';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

describe('Python anthropic SDK agents, unchanged, through lightning run', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`Python anthropic SDK (${mode})`, async (t) => {
      const run = await runAgent(
        t,
        upstream.url,
        [python(), path.join(AGENTS, 'provider_agents.py'), 'anthropic', mode],
        anthropicEnv(upstream),
      );
      assertAnthropicTrajectory(run, mode === 'stream');
      assertNotStored(run, ANTHROPIC_KEY);
    });
  }
});
