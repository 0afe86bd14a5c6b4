/**
 * Automatic scoring of a batch's rollouts as they finish: the one scoring pipeline (`rewards/score`,
 * rewards/job.ts) called by the batch runner for `lightning dataset run`, GRPO's iterations and
 * APO's evaluations alike. Finished rollouts wait in a queue and go to the daemon a few at a time,
 * with at most CONCURRENCY calls in flight, so scoring never holds up the next agents; the batch
 * ends once they are all scored. A relative judge ranks a task's rollouts together, so with one the
 * rollouts are scored together when the batch's agents are done. A failed call is reported as every
 * one of its rollouts' error; cancel drops what waits and stops the calls in flight.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { isAutomatic, type Rollout, type RolloutScore } from '../protocol';
import { hasOutcome } from '../protocol/status';
import { errorMessage } from '../protocol/errors';
import { allSpecs, defaultRewardsFile, judgeKeys, loadRewardsFile } from '../rewards/config';
import { ranksGroups } from '../rewards/scorer';
import type { RolloutScoring, RunnerClient } from './pool';

/** Scoring with a rewards file: checked now (a bad file fails before any agent runs), judge keys from `env`. */
export function scoringFromFile(rewardsFile: string, env: NodeJS.ProcessEnv): RolloutScoring {
  const loaded = loadRewardsFile(rewardsFile);
  return {
    source: { rewardsFile },
    apiKeys: judgeKeys(loaded, env),
    atEnd: allSpecs(loaded).some((s) => ranksGroups(s.spec)),
  };
}

/**
 * Scoring with the named rewards file, else with `.lightning/rewards.json` beside the store when it exists; undefined
 * when neither.
 */
export function scoringFor(
  rewardsFile: string | null,
  storeFile: string,
  env: NodeJS.ProcessEnv,
): RolloutScoring | undefined {
  const file = rewardsFile ?? defaultRewardsFile(storeFile);
  if (rewardsFile === null && !fs.existsSync(file)) return undefined;
  return scoringFromFile(file, env);
}

/** Reward lists read at once by finishedUnscored. */
const LOOKUPS_AT_ONCE = 8;

/**
 * The rollouts among `rollouts` that ended with an outcome but hold no automatically scored reward, in their order: a
 * resumed batch's rollouts that its interrupted runner did not get to score (it scores each as it ends), or all of them
 * when it ran without a rewards file. A scoring job of the interrupted runner still running in the daemon is not seen
 * here: the resume scores its rollouts too, and the daemon writes the rows of whichever job commits first
 * (`skipScored`).
 */
export async function finishedUnscored(client: RunnerClient, rollouts: readonly Rollout[]): Promise<string[]> {
  const ended = rollouts.filter((rollout) => hasOutcome(rollout.status)).map((rollout) => rollout.id);
  const scored = new Set<string>();
  for (let first = 0; first < ended.length; first += LOOKUPS_AT_ONCE) {
    await Promise.all(
      ended.slice(first, first + LOOKUPS_AT_ONCE).map(async (rolloutId) => {
        const { items } = await client.request('listRewards', { rolloutId });
        if (items.some(isAutomatic)) scored.add(rolloutId);
      }),
    );
  }
  return ended.filter((id) => !scored.has(id));
}

/** Calls to `rewards/score` in flight at once, and rollouts per call. */
const CONCURRENCY = 2;
const PER_CALL = 32;

export class ScoringQueue {
  private readonly waiting: string[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly jobs = new Set<string>();
  private readonly prefix = `batch-score-${crypto.randomBytes(4).toString('hex')}`;
  private calls = 0;
  private cancelled = false;
  private ending = false;
  /** Each scored rollout's result, by rollout id. */
  readonly results = new Map<string, RolloutScore>();

  constructor(
    private readonly client: RunnerClient,
    private readonly scoring: RolloutScoring,
    private readonly onScored: (score: RolloutScore) => void = () => undefined,
  ) {}

  /** Queues a rollout that reached its final status (succeeded, failed or timed out, no retry left). */
  add(rolloutId: string): void {
    if (this.cancelled) return;
    this.waiting.push(rolloutId);
    if (!this.scoring.atEnd) this.pump();
  }

  /** Scores what waits and resolves once every queued rollout is scored (or the queue was cancelled). */
  async drain(): Promise<void> {
    this.ending = true;
    this.pump();
    while (this.inFlight.size > 0) await Promise.all(this.inFlight);
  }

  /** Drops the waiting rollouts and asks the daemon to stop the jobs in flight. */
  cancel(): void {
    this.cancelled = true;
    this.waiting.splice(0);
    for (const jobId of this.jobs) void this.client.request('cancelScore', { jobId }).catch(() => undefined);
  }

  private pump(): void {
    // At the end of an `atEnd` batch, one call: a relative judge sees every rollout of a task.
    const perCall = this.scoring.atEnd ? Infinity : PER_CALL;
    while (!this.cancelled && this.waiting.length > 0 && this.inFlight.size < CONCURRENCY) {
      const call = this.score(this.waiting.splice(0, perCall)).finally(() => {
        this.inFlight.delete(call);
        if (!this.scoring.atEnd || this.ending) this.pump();
      });
      this.inFlight.add(call);
    }
  }

  private async score(rolloutIds: string[]): Promise<void> {
    const jobId = `${this.prefix}-${(this.calls += 1)}`;
    this.jobs.add(jobId);
    let scores: RolloutScore[];
    try {
      scores = (
        await this.client.request('scoreRollouts', {
          ...this.scoring.source,
          rollouts: rolloutIds,
          // Sent only when asked (a dataset run), so that GRPO's and APO's scoring reads no rewards it need not.
          ...(this.scoring.skipScored ? { skipScored: true } : {}),
          jobId,
          apiKeys: this.scoring.apiKeys,
        })
      ).results;
    } catch (error) {
      if (this.cancelled) return;
      const reported = errorMessage(error);
      scores = rolloutIds.map((rolloutId) => ({
        rolloutId,
        value: null,
        sources: [{ kind: 'error', name: 'scoring', error: reported }],
      }));
    } finally {
      this.jobs.delete(jobId);
    }
    for (const score of scores) {
      this.results.set(score.rolloutId, score);
      this.onScored(score);
    }
  }
}

/** A score's source errors as text (`function.style: timed out after 2000 ms; …`), or null when there are none. */
export function scoreErrors(score: RolloutScore): string | null {
  const errors = score.sources.flatMap((s) => (s.kind === 'error' ? [`${s.name}: ${s.error}`] : []));
  return errors.length > 0 ? errors.join('; ') : null;
}
