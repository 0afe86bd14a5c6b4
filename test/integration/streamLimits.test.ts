/**
 * What a streamed answer's record holds (docs/guarantees.md, "Limits"): the record's size limit counts content, not
 * the SSE framing around it, so a long answer in small events (over 8 MiB on the wire) is recorded whole and trains,
 * while one whose content is over the limit is `truncated` at `stream_content` and left out; a legacy `functions`
 * call streamed as `function_call` deltas and a legacy completion's streamed logprobs are recorded as the
 * non-streamed answer would hold them. The real `openai` SDK through `lightning run`, against streamShapes.ts
 * (streamLimitsPython.test.ts: the same with Python's).
 */
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { AGENTS } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import { startStreamShapesUpstream, type StreamShapesUpstream } from '../helpers/streamShapes';
import { assertStreamShapesRun } from '../helpers/streamShapesChecks';

let upstream: StreamShapesUpstream;
before(async () => {
  upstream = await startStreamShapesUpstream();
});
after(() => upstream.close());

describe('streamed answers: the limit counts content, and every shape is recorded whole', () => {
  test('one agent, four streams: each checked below', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'stream-shapes-agent.mjs')]);
    await assertStreamShapesRun(t, run, upstream);
  });
});
