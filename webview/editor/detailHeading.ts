/**
 * The rollout tab's heading of the selected span, pure: its kind (`rollout` for the root), the row's name
 * (spanLabel.ts), its duration, sequence and span name, its error, and an LLM call's outcome badge — `HTTP 429`,
 * `cancelled`, `truncated (…)`, `retry of #N` (format.ts's outcomeBadge, as the panel shows it).
 */
import type { Span } from '../../trainer-daemon/protocol/records';
import { formatDuration } from '../../trainer-daemon/protocol/format';
import { outcomeBadge, type StepHeading } from '../../trainer-daemon/protocol/ui/rolloutText';
import { spanLabel } from './spanLabel';
import { isRootSpan } from './timelineLayout';

export function detailHeading(span: Span, spans: Iterable<Span>): StepHeading {
  const root = isRootSpan(span);
  return {
    kind: root ? 'rollout' : span.category,
    name: spanLabel(span),
    meta: ` ${span.endMs === null ? 'running' : formatDuration(span.endMs - span.startMs)}${root ? '' : ` · #${span.sequence} · ${span.name}`}`,
    error: span.statusCode === 'error' ? ` ${span.statusMessage ?? 'error'}` : null,
    badge: outcomeBadge(span, spans),
  };
}
