/** `lightning show ID`: one rollout's trajectory: attempts, spans in order, rewards. */
import type { Command } from 'commander';
import { callBadge, type RolloutDetail, type Span } from '../../protocol';
import { InvalidInputError } from '../../protocol/errors';
import { openBackend } from '../backend';
import { duration, num, table, time, truncate } from '../textTable';
import { rolloutDuration } from '../../protocol/format';
import { failureHeadline, failureOutput } from '../../protocol/failureText';
import { describePlacement } from '../../protocol/rayRunner';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';
import { summarizeLlmCall } from '../summarize';

function spanRow(span: Span, sequenceOf: (spanId: string) => number | undefined): string[] {
  const tokens =
    span.promptTokens !== null || span.completionTokens !== null
      ? `${span.promptTokens ?? 0}+${span.completionTokens ?? 0}`
      : '';
  return [
    String(span.sequence),
    span.category,
    truncate(span.name, 48),
    span.spanId,
    duration(span.endMs === null ? null : span.endMs - span.startMs),
    tokens,
    span.statusCode === 'error' ? `error: ${truncate(span.statusMessage ?? '', 40)}` : span.statusCode,
    // How an LLM call ended when it was not a whole answer (left out of training), and what it retries.
    callBadge(span, sequenceOf) ?? '',
  ];
}

export function renderDetail({ rollout, attempts, spans, rewards, servedBy, spansLeftOut }: RolloutDetail): string {
  const lines = [
    `Rollout ${rollout.id}`,
    `  status    ${rollout.status}${rollout.exitCode !== null ? ` (exit ${rollout.exitCode})` : ''}${rollout.error ? ` — ${failureHeadline(rollout.error)}` : ''}`,
    `  mode      ${rollout.mode}`,
    `  label     ${rollout.label ?? '-'}`,
    `  task      ${rollout.task ? `${rollout.task.id ?? ''} ${truncate(JSON.stringify(rollout.task.input), 100)}`.trim() : '-'}`,
    `  source    ${rollout.source.kind === 'command' ? rollout.source.argv.join(' ') : rollout.source.kind === 'launch' ? `launch "${rollout.source.name}"` : 'api'}`,
    `  reward    ${num(rollout.reward)}`,
    `  created   ${time(rollout.createdAt)}   duration ${duration(rolloutDuration(rollout))}`,
    `  attempts  ${rollout.attemptCount}/${rollout.maxAttempts}   LLM calls ${rollout.llmCalls}   tokens ${rollout.promptTokens}+${rollout.completionTokens}`,
  ];
  if (servedBy)
    lines.push(
      `  policy    ${servedBy.checkpointId ? `checkpoint ${servedBy.checkpointId}` : 'training policy'} (run ${servedBy.runId}, step ${servedBy.step})`,
    );
  const node = attempts.at(-1)?.node;
  if (node) lines.push(`  node      Ray ${describePlacement(node)}, node id ${node.nodeId}`);
  // A failure's last output lines (protocol/failure.ts), as the agent printed them.
  const output = rollout.error ? failureOutput(rollout.error) : '';
  if (output) lines.push('', 'Output (last lines)', ...output.split('\n').map((line) => `  ${line}`));
  if (attempts.length > 1) {
    const nodes = attempts.some((a) => a.node);
    const header = ['#', 'STATUS', 'STARTED', ...(nodes ? ['NODE'] : []), 'ERROR'];
    lines.push(
      '',
      'Attempts',
      table(
        header,
        attempts.map((a) => [
          String(a.number),
          a.status,
          time(a.startedAt),
          ...(nodes ? [a.node ? `${a.node.ip} (${a.node.host})` : '-'] : []),
          a.error ? failureHeadline(a.error) : '',
        ]),
      ),
    );
  }
  if (spans.length === 0) lines.push('', 'No spans.');
  else {
    // Each span's row, with what went in and came out of each LLM call beneath it.
    const sequences = new Map(spans.map((span) => [span.spanId, span.sequence]));
    const rows = table(
      ['SEQ', 'KIND', 'NAME', 'SPAN', 'DURATION', 'TOKENS', 'STATUS', 'OUTCOME'],
      spans.map((span) => spanRow(span, (id) => sequences.get(id))),
    ).split('\n');
    lines.push('', rows[0]!);
    spans.forEach((span, i) => {
      lines.push(rows[i + 1]!);
      if (span.category === 'llm') lines.push(...summarizeLlmCall(span).map((line) => `       ${line}`));
    });
    if (spansLeftOut)
      lines.push(
        `… and ${spansLeftOut} more spans, not shown (all of them: lightning show ${rollout.id} --span-limit N, or lightning export)`,
      );
  }
  lines.push(
    '',
    rewards.length
      ? table(
          ['REWARD', 'NAME', 'VALUE', 'SOURCE', 'STEP', 'TIME', 'COMMENT'],
          rewards.map((w) => [
            String(w.id),
            w.name,
            num(w.value),
            w.source,
            w.spanId ?? '-',
            time(w.createdAt),
            truncate(w.comment ?? w.reason ?? '', 60),
          ]),
        )
      : 'No rewards.',
  );
  return `${lines.join('\n')}\n`;
}

export function registerShow(program: Command): void {
  program
    .command('show')
    .description('show a rollout: its spans (LLM calls, tools, rewards) in order, attempts and rewards')
    .argument('<id>', 'rollout id (or a unique prefix of at least 4 characters)')
    .addOption(storeOption())
    .addOption(jsonOption())
    .option('--span-limit <n>', 'show at most this many spans, the first in order (1..100000)', '10000')
    .action(async (id: string, options: GlobalOptions & { spanLimit: string }) => {
      const spanLimit = Number(options.spanLimit);
      if (!Number.isInteger(spanLimit) || spanLimit < 1 || spanLimit > 100_000)
        throw new InvalidInputError(`--span-limit ${options.spanLimit}: expected an integer 1..100000`);
      const backend = await openBackend(resolveStore(options));
      try {
        const detail = await backend.call('getRollout', { id, spanLimit });
        process.stdout.write(options.json ? `${JSON.stringify(detail)}\n` : renderDetail(detail));
      } finally {
        backend.close();
      }
    });
}
