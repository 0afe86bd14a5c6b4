/**
 * Messages between the side-panel webview and the extension (postMessage), as zod schemas. The
 * extension validates what the page sends with `safeParse`; the page imports only the types and reads
 * what the extension posts with ./pageInput (zod stays out of the webview bundle: the extension read every
 * record through the daemon protocol's schemas before posting it). Records (rollouts, spans, rewards)
 * reuse the daemon protocol's schemas: they are data shapes, not a channel.
 */
import { z } from 'zod';
import { Dataset, RayNode, Reward, Rollout, RolloutMode, RolloutStatus, Span, type Json } from '../records';
import { TrainingRun } from '../training';
import { RolloutTransitions } from '../lightningrl';
import { PolicyRef } from '../policy';
import { TrainingRunView } from './trainingRunView';
import { FILTER_TEXT_MAX } from '../rolloutValues';
import { RolloutGroups } from '../rpc';

export const DaemonStateKind = z.enum(['stopped', 'starting', 'running', 'failed']);
export type DaemonStateKind = z.infer<typeof DaemonStateKind>;

/** The list's filters (all optional; empty means everything). */
export const RolloutFilter = z.object({
  status: RolloutStatus.optional(),
  mode: RolloutMode.optional(),
  search: z.string().max(FILTER_TEXT_MAX).optional(),
  /** One dataset's or one batch's rollouts (Datasets section, Run Dataset). */
  datasetId: z.string().max(FILTER_TEXT_MAX).optional(),
  batchId: z.string().max(FILTER_TEXT_MAX).optional(),
});
export type RolloutFilter = z.infer<typeof RolloutFilter>;

const SpanId = z.string().regex(/^[0-9a-f]{16}$/);

/**
 * A span as the panel receives it. The extension validated it deeply (the daemon protocol's Span)
 * before posting, and postMessage can carry only cloneable data, so here the attribute values are
 * taken as the JSON they are instead of being walked again: re-validating a 2,000-span trajectory's
 * nested attributes cost more than drawing it.
 */
const PanelSpan = Span.extend({ attributes: z.record(z.string(), z.custom<Json>()) });

export const DatasetRow = z.object({
  dataset: Dataset,
  splits: z.object({ train: z.number().int(), val: z.number().int(), test: z.number().int() }),
});
export type DatasetRow = z.infer<typeof DatasetRow>;

export const WebviewToExtension = z.discriminatedUnion('type', [
  /** The webview is listening: the extension answers with the daemon state. */
  z.object({ type: z.literal('ready') }),
  /** A page of the rollout list; `requestId` ties the answer to the request (filters change under it). */
  z.object({
    type: z.literal('listRollouts'),
    requestId: z.number().int(),
    filter: RolloutFilter,
    cursor: z.string().nullable(),
    /** false: only the rollouts outside any batch (the list's own runs, above the groups). */
    inBatch: z.boolean().optional(),
  }),
  /**
   * The filter's rollouts counted, in all and per run and batch (the list's groups and its one count); the newest
   * `limit` runs.
   */
  z.object({
    type: z.literal('listGroups'),
    requestId: z.number().int(),
    filter: RolloutFilter,
    limit: z.number().int().min(1).max(1_000),
  }),
  z.object({ type: z.literal('selectRollout'), id: z.string().min(1) }),
  z.object({
    type: z.literal('loadSpans'),
    rolloutId: z.string().min(1),
    afterSequence: z.number().int().nonnegative(),
  }),
  z.object({
    type: z.literal('annotate'),
    rolloutId: z.string().min(1),
    spanId: SpanId.nullable(),
    value: z.number().finite(),
    comment: z.string().max(10_000).nullable(),
  }),
  z.object({ type: z.literal('copy'), text: z.string().max(50_000_000) }),
  /** Training runs: the list, one run's detail (live while open), cancelling one. */
  z.object({ type: z.literal('listTrainingRuns') }),
  /** `afterStep`: the panel has the points up to this step (a live refresh fetches only newer ones). */
  z.object({
    type: z.literal('openTrainingRun'),
    id: z.string().min(1),
    afterStep: z.number().int().min(-1).optional(),
  }),
  z.object({ type: z.literal('cancelTrainingRun'), id: z.string().min(1) }),
  /** A finished run's outcome in the editor (APO: the diff, with Apply when this window marked the prompt). */
  z.object({ type: z.literal('showTrainingRunResult'), id: z.string().min(1) }),
  /** The Datasets section (re)loads. */
  z.object({ type: z.literal('listDatasets') }),
  /** The selected rollout's Training view. */
  z.object({ type: z.literal('loadTransitions'), rolloutId: z.string().min(1) }),
  /** Accept, correct or reject an automatic reward (by id): a human row on the same dimension (README). */
  z.object({
    type: z.literal('reviewReward'),
    rolloutId: z.string().min(1),
    rewardId: z.number().int().positive(),
    action: z.enum(['accept', 'correct', 'reject']),
  }),
  /** A cancelled or failed GRPO run continues from its last checkpoint (Lightning: Resume Training). */
  z.object({ type: z.literal('resumeTrainingRun'), id: z.string().min(1) }),
  /** Point rollouts at a checkpoint (the command `lightning.useCheckpoint`). */
  z.object({ type: z.literal('useCheckpoint'), checkpointId: z.string().min(1) }),
  /** Write a checkpoint as a PEFT adapter or a Hugging Face folder (the command `lightning.exportCheckpoint`). */
  z.object({ type: z.literal('exportCheckpoint'), checkpointId: z.string().min(1) }),
  /** Delete a checkpoint, after a confirmation (the command `lightning.deleteCheckpoint`). */
  z.object({ type: z.literal('deleteCheckpoint'), checkpointId: z.string().min(1) }),
  /** A rollout in the editor area: a preview tab (a click), pinned (a double-click, Enter), or to the side. */
  z.object({ type: z.literal('openRolloutTab'), id: z.string().min(1), mode: z.enum(['preview', 'pinned', 'beside']) }),
  /** Two rollouts side by side in a Compare tab. */
  z.object({ type: z.literal('compareRollouts'), left: z.string().min(1), right: z.string().min(1) }),
  /** A training run in the editor area (full-size charts, iterations, checkpoints). */
  z.object({ type: z.literal('openRunTab'), id: z.string().min(1) }),
]);
export type WebviewToExtension = z.infer<typeof WebviewToExtension>;

export const ExtensionToWebview = z.discriminatedUnion('type', [
  z.object({ type: z.literal('daemonState'), state: DaemonStateKind, message: z.string().nullable() }),
  z.object({
    type: z.literal('rolloutPage'),
    requestId: z.number().int(),
    items: z.array(Rollout),
    nextCursor: z.string().nullable(),
  }),
  z.object({ type: z.literal('rolloutGroups'), requestId: z.number().int(), groups: RolloutGroups }),
  /** Rollouts created or changed (live, from the daemon's notifications). */
  z.object({ type: z.literal('rolloutsChanged'), rollouts: z.array(Rollout) }),
  /**
   * A page of the selected rollout's spans, in sequence order: a trajectory opens with its first
   * page and fills in as the rest arrive; `complete` once the last stored span was sent.
   */
  z.object({ type: z.literal('spans'), rolloutId: z.string(), spans: z.array(PanelSpan), complete: z.boolean() }),
  /** New spans of a rollout exist (its shown detail fetches them with loadSpans). */
  z.object({ type: z.literal('spansAvailable'), rolloutId: z.string(), toSequence: z.number().int() }),
  /** The rewards of a rollout, after one was added (here or in another window). */
  z.object({ type: z.literal('rewards'), rolloutId: z.string(), items: z.array(Reward) }),
  /** Select a rollout from outside the panel (the review queue). */
  z.object({ type: z.literal('reveal'), rollout: Rollout }),
  z.object({ type: z.literal('error'), message: z.string() }),
  z.object({ type: z.literal('trainingRuns'), items: z.array(TrainingRun) }),
  /** A training run changed (live: a round recorded, its status); an open detail refetches. */
  z.object({ type: z.literal('trainingRunChanged'), run: TrainingRun }),
  z.object({ type: z.literal('trainingRunDetail'), view: TrainingRunView }),
  /** Open this run's detail (Start Training started it). */
  z.object({ type: z.literal('showTrainingRun'), id: z.string() }),
  /** Every dataset with its task counts per split. */
  z.object({ type: z.literal('datasets'), items: z.array(DatasetRow) }),
  /** Show one batch's rollouts (Run Dataset started or finished one). */
  z.object({ type: z.literal('showBatch'), batchId: z.string() }),
  z.object({ type: z.literal('transitions'), rolloutId: z.string(), view: RolloutTransitions }),
  /**
   * The policy that served the selected rollout's LLM calls (a training iteration or a checkpoint in use), or null; and
   * the Ray node its last attempt ran on, if it ran on one.
   */
  z.object({
    type: z.literal('servedBy'),
    rolloutId: z.string(),
    policy: PolicyRef.nullable(),
    node: RayNode.optional(),
  }),
  /** An editor tab shows the rollout's steps (the panel shows its summary), or no longer does. */
  z.object({ type: z.literal('rolloutInTab'), rolloutId: z.string(), inTab: z.boolean() }),
]);
export type ExtensionToWebview = z.infer<typeof ExtensionToWebview>;
