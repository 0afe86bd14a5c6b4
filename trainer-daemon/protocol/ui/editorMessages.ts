/**
 * Messages between an editor tab (a rollout, a comparison of two rollouts, a training run) and
 * the extension, as zod schemas. The extension validates what a tab sends; the tab imports only the
 * types (its bundle ships without zod) and reads what the extension posts with ../pageInput. A tab's
 * target is also its saved state (`setState`), which VS Code hands back to the extension's
 * WebviewPanelSerializer after a window reload: `restoreEditorState` reads it back or says why it
 * cannot. What both ends compute from a target (its key, its title) is in ./editorTarget.
 */
import { z } from 'zod';
import { RayNode, Reward, Rollout, Span, type Json } from '../records';
import { TrainingRun } from '../training';
import { TrainingRunView } from './trainingRunView';

const Id = z.string().min(1).max(200);
const SpanId = z.string().regex(/^[0-9a-f]{16}$/);

export const EditorTarget = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('rollout'), rolloutId: Id }),
  z.object({ kind: z.literal('compare'), left: Id, right: Id }),
  z.object({ kind: z.literal('run'), runId: Id }),
]);
export type EditorTarget = z.infer<typeof EditorTarget>;

/** What a tab saves: its target, whether it is still a preview, and where the user was. */
export const EditorState = z.object({
  target: EditorTarget,
  preview: z.boolean().default(false),
  /** Rollout tab: the selected span. */
  selectedSpanId: SpanId.nullable().default(null),
  /** Run tab: the run drawn over this one. */
  overlayRunId: Id.nullable().default(null),
  /** Run tab: the charts' smoothing weight (TensorBoard's 0–0.99). */
  smoothing: z.number().min(0).max(0.99).optional(),
  /** Rollout tab: the waterfall's height (px) the user dragged it to; by default sized to its rows. */
  timelineHeight: z.number().int().min(60).max(4000).optional(),
});
export type EditorState = z.infer<typeof EditorState>;

/** A saved state read back (after a reload), or the reason it cannot be. */
export function restoreEditorState(raw: unknown): { ok: true; state: EditorState } | { ok: false; error: string } {
  if (raw === undefined || raw === null) return { ok: false, error: 'the tab saved no state' };
  const parsed = EditorState.safeParse(raw);
  if (parsed.success) return { ok: true, state: parsed.data };
  const issue = parsed.error.issues[0];
  return {
    ok: false,
    error: `the tab's saved state is not valid (${issue?.path.join('.') || 'state'}: ${issue?.message ?? 'invalid'})`,
  };
}

/**
 * A span as a tab receives it: validated by the extension, attribute values taken as the JSON they are
 * (trainer-daemon/protocol/ui/panelMessages.ts).
 */
const TabSpan = Span.extend({ attributes: z.record(z.string(), z.custom<Json>()) });

export const EditorToExtension = z.discriminatedUnion('type', [
  /** The tab is listening; it says what it shows (its saved state, if any). */
  z.object({ type: z.literal('ready') }),
  /**
   * The tab painted what it shows for the first time (a rollout's first rows, a comparison's pairs): work the extension
   * held back for it may go on.
   */
  z.object({ type: z.literal('painted') }),
  z.object({ type: z.literal('loadSpans'), rolloutId: Id, afterSequence: z.number().int().nonnegative() }),
  /** One whole span (the tab has it slimmed: trainer-daemon/protocol/slimSpan.ts), for its conversation. */
  z.object({ type: z.literal('loadSpan'), rolloutId: Id, sequence: z.number().int().positive() }),
  z.object({
    type: z.literal('annotate'),
    rolloutId: Id,
    spanId: SpanId.nullable(),
    value: z.number().finite(),
    comment: z.string().max(10_000).nullable(),
  }),
  z.object({ type: z.literal('copy'), text: z.string().max(50_000_000) }),
  /** The tab's own state changed (selection, overlay): kept for the serializer. */
  z.object({ type: z.literal('state'), state: EditorState }),
  /** Keep this preview tab open (it was double-clicked, annotated). */
  z.object({ type: z.literal('pin') }),
  z.object({ type: z.literal('openRollout'), rolloutId: Id, beside: z.boolean().default(false) }),
  /** Pick a second rollout (quick pick, same task first) and compare this one with it. */
  z.object({ type: z.literal('compareWith'), rolloutId: Id }),
  z.object({ type: z.literal('loadRun'), runId: Id, afterStep: z.number().int().min(-1).optional() }),
  z.object({ type: z.literal('listRuns') }),
  z.object({ type: z.literal('useCheckpoint'), checkpointId: Id }),
  z.object({ type: z.literal('exportCheckpoint'), checkpointId: Id }),
  z.object({ type: z.literal('deleteCheckpoint'), checkpointId: Id }),
  /** Open the best or worst rollout (by reward) of a run's iteration (its training batch). */
  z.object({
    type: z.literal('openIterationRollout'),
    runId: Id,
    step: z.number().int().nonnegative(),
    which: z.enum(['best', 'worst']),
  }),
]);
export type EditorToExtension = z.infer<typeof EditorToExtension>;

export const ExtensionToEditor = z.discriminatedUnion('type', [
  /** What the tab shows (at start, and when a preview tab is reused for another rollout). */
  z.object({ type: z.literal('show'), state: EditorState }),
  /** `node`: the Ray node its last attempt ran on, when the extension read its attempts (absent on live updates). */
  z.object({ type: z.literal('rollout'), rollout: Rollout, node: RayNode.optional() }),
  z.object({ type: z.literal('spans'), rolloutId: z.string(), spans: z.array(TabSpan), complete: z.boolean() }),
  /** One whole span, as asked with loadSpan. */
  z.object({ type: z.literal('span'), span: TabSpan }),
  z.object({ type: z.literal('spansAvailable'), rolloutId: z.string(), toSequence: z.number().int() }),
  z.object({ type: z.literal('rewards'), rolloutId: z.string(), items: z.array(Reward) }),
  z.object({ type: z.literal('runView'), view: TrainingRunView }),
  z.object({ type: z.literal('runChanged'), run: TrainingRun }),
  z.object({ type: z.literal('runs'), items: z.array(TrainingRun) }),
  z.object({ type: z.literal('error'), message: z.string() }),
]);
export type ExtensionToEditor = z.infer<typeof ExtensionToEditor>;
