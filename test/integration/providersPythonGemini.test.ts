// needs: venv
/**
 * Agents on the Python SDK `google-genai` (LIGHTNING_TEST_PYTHON), unchanged,
 * through `lightning run`: the same trajectories as the JS SDKs' (providers.test.ts), and one function
 * called twice in a turn with the same ids and pairing as `@google/genai`'s (geminiToolIds.test.ts).
 */
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { assertPaired } from '../helpers/geminiToolIds';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { AGENTS, assertGeminiTrajectory, geminiEnv, python } from '../helpers/providerAgents';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

const agent = (mode: string): string[] => [python(), path.join(AGENTS, 'provider_agents.py'), 'gemini', mode];

describe('Python google-genai SDK agents, unchanged, through lightning run', () => {
  for (const mode of ['json', 'stream'] as const) {
    test(`Python google-genai (${mode})`, async (t) => {
      const run = await runAgent(t, upstream.url, agent(mode), geminiEnv(upstream));
      assertGeminiTrajectory(upstream, run, mode === 'stream');
    });

    test(`Python google-genai (${mode}), one function called twice in a turn: ids by position, responses paired by order and name`, async (t) => {
      const run = await runAgent(t, upstream.url, agent(mode), {
        ...geminiEnv(upstream),
        AGENT_MODEL: 'gemini-parallel',
      });
      await assertPaired(run, { answer: ['call_1_0', 'call_1_1'] });
    });
  }

  test('Python google-genai under --token-ids, one function called twice: the policy’s ids reach the agent and come back paired', async (t) => {
    const run = await runAgent(
      t,
      upstream.url,
      agent('json'),
      { GOOGLE_GEMINI_BASE_URL: '', GEMINI_API_KEY: '', AGENT_MODEL: 'gemini-parallel' },
      ['--token-ids'],
    );
    await assertPaired(run, { answer: ['call_paris', 'call_oslo'] });
  });
});
