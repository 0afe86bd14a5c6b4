import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { AGENT, finished, setUp, storeOf, WORKERS } from '../helpers/apo';
import { runCli } from '../helpers/daemon';

test('apo: an agent that loads its prompt from a file is optimized through temporary copies; the file is left alone', async (t) => {
  const { cwd, upstream, calls } = await setUp(t);
  fs.writeFileSync(path.join(cwd, 'prompt.txt'), 'Add the numbers {a} and {b}, please.');
  const run = await runCli(
    [
      'train',
      '--algorithm',
      'apo',
      '--resource',
      'file-prompt',
      '--prompt-file',
      'prompt.txt',
      '--dataset',
      'sums',
      '--json',
      '--concurrency',
      '4',
      '--rounds',
      '1',
      '--beam',
      '1',
      '--branch',
      '1',
      '--gradient-batch',
      '3',
      '--val-batch',
      '2',
      // Agent workers (one process per batch): the copy is what the batch's worker was started with.
      ...WORKERS,
      '--',
      process.execPath,
      AGENT,
      '--prompt-file',
      'prompt.txt',
    ],
    {
      cwd,
      env: { LIGHTNING_UPSTREAM_URL: upstream.url, OPENAI_BASE_URL: '', OPENAI_API_BASE: '', OPENAI_API_KEY: '' },
    },
  );
  assert.equal(run.code, 0, run.stderr);
  const result = finished(run.stdout);
  assert.equal(result.seed.prompt, 'Add the numbers {a} and {b}, please.');
  assert.deepEqual([result.seed.valScore, result.best.valScore], [0.5, 1]);
  assert.ok(
    calls.agent.some((prompt) => /please\.\nAnswer with digits only\.$/.test(prompt)),
    'agents ran with the candidate from the copy',
  );
  assert.equal(fs.readFileSync(path.join(cwd, 'prompt.txt'), 'utf8'), 'Add the numbers {a} and {b}, please.');
  const store = storeOf(cwd);
  t.after(() => store.close());
  assert.equal(store.getResource('file-prompt').resource.value, result.seed.prompt);
});
