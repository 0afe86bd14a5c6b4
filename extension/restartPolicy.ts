/**
 * When to restart a crashed daemon and when to give up, in the manner of vscode-languageclient's
 * DefaultErrorHandler: exponential backoff between restarts, and no more than `maxCrashes` crashes
 * within `windowMs` (a daemon that keeps crashing needs the user, not another restart).
 */
export interface RestartPolicyOptions {
  readonly maxCrashes: number;
  readonly windowMs: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicyOptions = {
  maxCrashes: 5,
  windowMs: 3 * 60_000,
  baseDelayMs: 250,
  maxDelayMs: 8_000,
};

export type RestartDecision =
  { readonly action: 'restart'; readonly delayMs: number } | { readonly action: 'giveUp'; readonly crashes: number };

export class RestartPolicy {
  private crashes: number[] = [];

  constructor(private readonly options: RestartPolicyOptions = DEFAULT_RESTART_POLICY) {}

  /** Records a crash at `now` and decides what to do about it. */
  onCrash(now: number): RestartDecision {
    this.crashes = [...this.crashes.filter((time) => now - time < this.options.windowMs), now];
    if (this.crashes.length > this.options.maxCrashes) return { action: 'giveUp', crashes: this.crashes.length };
    const delayMs = Math.min(this.options.maxDelayMs, this.options.baseDelayMs * 2 ** (this.crashes.length - 1));
    return { action: 'restart', delayMs };
  }

  /** A manual restart starts counting afresh. */
  reset(): void {
    this.crashes = [];
  }
}
