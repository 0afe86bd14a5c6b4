/**
 * What a streamed answer's record holds (docs/guarantees.md, "Limits"): the record's size limit counts content, not
 * the SSE framing around it, so a long answer in small events (over 8 MiB on the wire) is recorded whole and trains,
 * while one whose content is over the limit is `truncated` at `stream_content` and left out; a legacy `functions`
 * call streamed as `function_call` deltas and a legacy completion's streamed logprobs are recorded as the
 * non-streamed answer would hold them. The real `openai` SDK through `lightning run`, against streamShapes.ts.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { RECORD_LIMITS } from '../../trainer-daemon/protocol/secrets';
import { runCli } from '../helpers/daemon';
import { exportRows, llmOf, modelOf } from '../helpers/outcomeChecks';
import { AGENTS } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import {
  COMPLETION_LOGPROBS,
  COMPLETION_TOKENS,
  FRAMED_CONTENT_CHARS,
  OVER_CONTENT_CHARS,
  startStreamShapesUpstream,
  type StreamShapesUpstream,
} from '../helpers/streamShapes';

type Obj = Record<string, unknown>;
const choiceOf = (span: Span): Obj => ((span.attributes['lightning.response'] as Obj).choices as Obj[])[0]!;

let upstream: StreamShapesUpstream;
before(async () => {
  upstream = await startStreamShapesUpstream();
});
after(() => upstream.close());

describe('streamed answers: the limit counts content, and every shape is recorded whole', () => {
  test('one agent, four streams: each checked below', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'stream-shapes-agent.mjs')]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.ok(
      run.stdout.includes(
        `FRAMED ${FRAMED_CONTENT_CHARS} OVER ${OVER_CONTENT_CHARS} CALL get_weather({"city":"Paris"}) TEXT " 4."`,
      ),
      run.stdout,
    );
    assert.equal(llmOf(run).length, 4);

    await t.test(
      'a stream over the limit in SSE bytes and under it in content is recorded whole, ok, and exported',
      async () => {
        assert.ok(
          upstream.framedBytes() > RECORD_LIMITS.maxRecordChars,
          `the framing alone passes the limit (${upstream.framedBytes()} bytes)`,
        );
        const [framed] = llmOf(run).filter((span) => modelOf(span) === 'framed-stream');
        assert.deepEqual(spanOutcome(framed!), { kind: 'ok' });
        const message = choiceOf(framed!).message as Obj;
        assert.equal(message.content, 'abcd'.repeat(FRAMED_CONTENT_CHARS / 4));
        assert.equal((framed!.attributes['lightning.response'] as Obj).lightning_truncated, undefined);
        const chat = await exportRows(run, 'chat');
        const row = chat.rows.find((r) => ((r.messages as Obj[]).at(-1)!.content as string).startsWith('abcd'));
        assert.equal(
          (row!.messages as Obj[]).at(-1)!.content,
          message.content,
          'the whole answer is a fine-tuning row',
        );
      },
    );

    await t.test(
      'a stream whose content is over the limit is truncated, says which limit, and is left out of training',
      async () => {
        const [over] = llmOf(run).filter((span) => modelOf(span) === 'over-content');
        assert.deepEqual(spanOutcome(over!), { kind: 'truncated', limit: 'stream_content' });
        assert.match(String((over!.attributes['lightning.response'] as Obj).lightning_truncated), /record size limit/);
        const shown = await runCli(['show', run.last.id], { cwd: run.cwd });
        assert.match(shown.stdout, /truncated \(stream content limit\)/);
        const transitions = await exportRows(run, 'transitions');
        assert.equal(
          transitions.rows.some((row) => row.spanId === over!.spanId),
          false,
        );
        assert.deepEqual(transitions.summary.skipped, { upstreamError: 0, cancelled: 0, truncated: 1 });
      },
    );

    await t.test('a streamed legacy `functions` answer keeps its function_call', () => {
      const [call] = llmOf(run).filter((span) => (span.attributes['lightning.request'] as Obj).functions !== undefined);
      const choice = choiceOf(call!);
      assert.equal(choice.finish_reason, 'function_call');
      assert.deepEqual((choice.message as Obj).function_call, { name: 'get_weather', arguments: '{"city":"Paris"}' });
      assert.deepEqual(spanOutcome(call!), { kind: 'ok' });
    });

    await t.test(
      'a streamed legacy completion keeps its logprobs as /completions returns them, and training reads them',
      async () => {
        const [completion] = llmOf(run).filter((span) => span.attributes['lightning.api'] === 'completions');
        const choice = choiceOf(completion!);
        assert.equal(choice.text, COMPLETION_TOKENS.join(''));
        assert.deepEqual(choice.logprobs, {
          tokens: [...COMPLETION_TOKENS],
          token_logprobs: [...COMPLETION_LOGPROBS],
          top_logprobs: COMPLETION_TOKENS.map((token, i) => ({ [token]: COMPLETION_LOGPROBS[i] })),
          text_offset: [4, 6],
        });
        const transitions = await exportRows(run, 'transitions');
        const row = transitions.rows.find((r) => r.spanId === completion!.spanId);
        assert.deepEqual(row!.logprobs, [...COMPLETION_LOGPROBS]);
      },
    );
  });
});
