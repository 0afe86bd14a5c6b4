/** The dataset of trivial rollouts that the runner and scale benchmarks time `lightning dataset run` over. */
import fs from 'node:fs';
import path from 'node:path';
import { runCli } from '../helpers/daemon';

/** The trivial agent as a worker: takes rollouts until the batch is done, ends each one successfully. */
const TRIVIAL_WORKER = `
const loop = async () => {
  for (;;) {
    const next = await fetch(process.env.LIGHTNING_RUNNER_URL + '/next', { method: 'POST' });
    if (next.status === 204) return;
    const { url } = await next.json();
    await fetch(url + '/finish', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"status":"succeeded"}' });
  }
};
Promise.all(Array.from({ length: Number(process.env.LIGHTNING_RUNNER_CONCURRENCY) }, loop));
`;

/**
 * Makes `cwd` and imports `rollouts` empty tasks into its dataset `tasks`; with `worker`, also writes the
 * trivial agent worker to `cwd/worker.js`.
 */
export async function importTrivialDataset(
  cwd: string,
  rollouts: number,
  options: { worker?: boolean } = {},
): Promise<void> {
  fs.mkdirSync(cwd, { recursive: true });
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    Array.from({ length: rollouts }, (_, i) => JSON.stringify({ id: `t${i}` })).join('\n'),
  );
  if (options.worker) fs.writeFileSync(path.join(cwd, 'worker.js'), TRIVIAL_WORKER);
  await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
}
