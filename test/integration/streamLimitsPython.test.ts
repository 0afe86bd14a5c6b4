// needs: venv
/**
 * What a streamed answer's record holds, with the Python `openai` SDK (streamLimits.test.ts has the Node SDK's):
 * a long answer in small events recorded whole, one whose content is over the limit `truncated` at
 * `stream_content` and left out, a streamed legacy `function_call` and a streamed legacy completion's logprobs
 * recorded as the non-streamed answer would hold them. Through `lightning run`, against streamShapes.ts.
 */
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { AGENTS, python } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import { startStreamShapesUpstream, type StreamShapesUpstream } from '../helpers/streamShapes';
import { assertStreamShapesRun } from '../helpers/streamShapesChecks';

let upstream: StreamShapesUpstream;
before(async () => {
  upstream = await startStreamShapesUpstream();
});
after(() => upstream.close());

describe('Python openai, streamed answers: the limit counts content, and every shape is recorded whole', () => {
  test('one agent, four streams: each checked below', async (t) => {
    const run = await runAgent(t, upstream.url, [
      python(),
      path.join(AGENTS, 'openai_shapes_agent.py'),
      'stream-shapes',
    ]);
    await assertStreamShapesRun(t, run, upstream);
  });
});
