/**
 * What a run of an agent streaming the four shapes of streamShapes.ts must leave (streamLimits.test.ts for Node,
 * streamLimitsPython.test.ts for Python): the long answer in small events recorded whole, ok and exported; the one past
 * the content limit truncated, said so and left out; the streamed legacy `function_call` kept; the streamed legacy
 * completion's logprobs as `/completions` returns them, and read by training.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { spanOutcome, type Span } from '../../trainer-daemon/protocol';
import { RECORD_LIMITS } from '../../trainer-daemon/protocol/recordScrub';
import { runCli } from './daemon';
import { exportRows, llmOf, modelOf } from './outcomeChecks';
import type { AgentRun } from './runAgent';
import {
  COMPLETION_LOGPROBS,
  COMPLETION_TOKENS,
  FRAMED_CONTENT_CHARS,
  OVER_CONTENT_CHARS,
  type StreamShapesUpstream,
} from './streamShapes';

type Obj = Record<string, unknown>;
const choiceOf = (span: Span): Obj => ((span.attributes['lightning.response'] as Obj).choices as Obj[])[0]!;

/** The run's record and exports, each shape a subtest of `t`. */
export async function assertStreamShapesRun(
  t: TestContext,
  run: AgentRun,
  upstream: StreamShapesUpstream,
): Promise<void> {
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
      assert.equal((row!.messages as Obj[]).at(-1)!.content, message.content, 'the whole answer is a fine-tuning row');
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
}
