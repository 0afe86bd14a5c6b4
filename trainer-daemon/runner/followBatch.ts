/**
 * Following a worker-mode batch from another process (`lightning dataset run`, APO): `workerBatches/events`
 * long-polled over RPC, the protocol's way to hear of attempts across processes. A runner inside the daemon
 * subscribes to the queue instead (WorkerBatches.follow) and never polls its own daemon.
 */
import type { BatchFollower, RunnerClient } from './pool';

/** How long one `workerBatches/events` call waits for an attempt to end. */
const POLL_WAIT_MS = 5_000;

export function followOverRpc(client: RunnerClient): BatchFollower {
  return {
    async follow(batchId, listener) {
      let after = 0;
      let cancelled = false;
      for (;;) {
        const page = await client.request('workerBatchEvents', { id: batchId, after, waitMs: POLL_WAIT_MS });
        for (const event of page.events) listener.onAttempt(event);
        after = page.next;
        if (page.cancelled && !cancelled) {
          cancelled = true;
          listener.onCancelled();
        }
        if (page.done) return;
      }
    },
  };
}
