/**
 * Where a resumed dataset batch sends the rest of its calls (cli/batchRouting.ts): the record of where its first went,
 * the flags a resume omits taken from it, and a resume whose calls would go elsewhere refused.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { checkResumedRouting, recordBatchRouting, resumedBatchRouting } from '../../trainer-daemon/cli/batchRouting';
import type { Routing, RoutingOptions } from '../../trainer-daemon/cli/callRouting';
import { tempDir } from '../helpers/tmp';

const routing = (upstream: string | null, tokenIds = false): Routing => ({ upstream, tokenIds, resources: {} });

/** Resolves as resolveRouting does without a checkpoint: the agent's OPENAI_BASE_URL, else --upstream. */
const resolved = (options: { upstream?: string; tokenIds?: boolean }, env: NodeJS.ProcessEnv): Routing =>
  routing(env.OPENAI_BASE_URL ?? options.upstream ?? null, options.tokenIds ?? false);

test('a resume takes the omitted flags from the record and is refused where its calls would go elsewhere', (t) => {
  const dir = tempDir(t);
  recordBatchRouting(dir, { upstream: 'http://h:1/v1/', tokenIds: true }, routing('http://h:1/v1/', true));
  assert.equal(fs.statSync(path.join(dir, 'batch.json')).mode & 0o777, 0o600);
  const said: string[] = [];
  const say = (line: string): void => void said.push(line);
  const omitted = resumedBatchRouting(dir, 'b', {}, {}, say);
  assert.deepEqual(omitted, { upstream: 'http://h:1/v1', tokenIds: true });
  assert.deepEqual(said, [
    "lightning: resuming with the batch's upstream http://h:1/v1",
    "lightning: resuming with the batch's --token-ids",
  ]);
  checkResumedRouting(dir, 'b', resolved(omitted, {}), {});
  // The same upstream named again (without its trailing slash) is the same place.
  checkResumedRouting(dir, 'b', resolved({ upstream: 'http://h:1/v1', tokenIds: true }, {}), {});
  // The agent's own OPENAI_BASE_URL wins over --upstream: a resume from a shell that sets another is refused.
  const env = { OPENAI_BASE_URL: 'http://other:2/v1' };
  const none: RoutingOptions = {};
  const fromShell = resumedBatchRouting(dir, 'b', none, env, () => undefined);
  assert.equal(fromShell.upstream, undefined, 'not said to resume with the batch’s upstream: the shell’s wins');
  assert.throws(
    () => checkResumedRouting(dir, 'b', resolved(fromShell, env), env),
    /batch b's calls went to http:\/\/h:1\/v1; this resume would send the rest to http:\/\/other:2\/v1 \(OPENAI_BASE_URL\): resume it with --upstream http:\/\/h:1\/v1 and without OPENAI_BASE_URL/,
  );
});

test('a batch without token ids refuses them on resume; an upstream with credentials must be named again', (t) => {
  const plain = tempDir(t);
  recordBatchRouting(plain, {}, routing(null));
  assert.throws(
    () => checkResumedRouting(plain, 'b', routing(null, true), {}),
    /--token-ids: batch b was started without --token-ids/,
  );
  assert.throws(
    () => checkResumedRouting(plain, 'b', routing('http://h:1/v1'), {}),
    /batch b's calls went to the daemon's upstream; this resume would send the rest to http:\/\/h:1\/v1: resume it without --upstream/,
  );

  const secret = tempDir(t);
  recordBatchRouting(secret, { upstream: 'http://me:pw@h:1/v1' }, routing('http://me:pw@h:1/v1'));
  assert.doesNotMatch(fs.readFileSync(path.join(secret, 'batch.json'), 'utf8'), /pw/, 'no credential recorded');
  assert.throws(
    () => resumedBatchRouting(secret, 'b', {}, {}, () => undefined),
    /batch b was started with --upstream http:\/\/h:1\/v1, whose credentials were not recorded: resume it with that --upstream again/,
  );
  checkResumedRouting(secret, 'b', routing('http://me:pw@h:1/v1'), {});
});

test('a checkpoint batch, an older batch without a record and an unreadable record resume with the flags given', (t) => {
  const served = tempDir(t);
  recordBatchRouting(served, { checkpoint: 'ckpt-1' }, routing('http://127.0.0.1:5/p/k/v1', true));
  assert.deepEqual(
    resumedBatchRouting(served, 'b', {}, {}, () => undefined),
    {},
  );
  checkResumedRouting(served, 'b', routing('http://127.0.0.1:6/p/k/v1', true), {});
  const older = tempDir(t);
  assert.deepEqual(
    resumedBatchRouting(older, 'b', { upstream: 'http://x/v1' }, {}, () => undefined),
    {
      upstream: 'http://x/v1',
    },
  );
  checkResumedRouting(older, 'b', routing('http://x/v1'), {});
  const broken = tempDir(t);
  fs.writeFileSync(path.join(broken, 'batch.json'), '{}');
  const said: string[] = [];
  assert.deepEqual(
    resumedBatchRouting(broken, 'b', {}, {}, (line) => void said.push(line)),
    {},
  );
  assert.match(said[0]!, /batch\.json is not a batch routing record; resuming with the flags given/);
});
