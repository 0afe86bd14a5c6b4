/**
 * The episode reward is written twice — in SQL, for the rollout list's reward column
 * (store/rollouts.ts), and in TypeScript, for training (lightningrl/credit.ts) — because the list
 * sorts and filters on it in the database. This test holds them equal on a real store: many
 * rollouts, each with a random history of rewards from every source, other dimensions mixed in, some with an agent's
 * reward of an attempt that failed (which neither counts).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { RewardPolicy, RewardSource } from '../../trainer-daemon/protocol';
import { episodeReward } from '../../trainer-daemon/lightningrl/credit';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

test("the rollout list's reward (SQL) is the episode reward training uses (TypeScript), whatever the history", (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  let seed = 42;
  const random = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const sources = RewardSource.options;
  const policy = RewardPolicy.parse({});
  let compared = 0;
  for (let i = 0; i < 200; i += 1) {
    const { id } = store.createRollout(parsed('createRollout', { label: `r${i}`, maxAttempts: 2 }));
    if (random() < 0.3) {
      // An agent's reward in an attempt that failed: neither training's nor the list's.
      store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
      store.addReward(
        parsed('addReward', { rolloutId: id, value: Math.round(random() * 100) / 100, source: 'agent' }),
        1,
      );
      store.transitionRollout(parsed('transitionRollout', { id, to: 'failed' }));
      store.transitionRollout(parsed('transitionRollout', { id, to: 'queued' }));
      store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    }
    const count = Math.floor(random() * 6);
    for (let j = 0; j < count; j += 1) {
      const source = sources[Math.floor(random() * sources.length)]!;
      const name = random() < 0.2 ? 'quality' : 'reward';
      store.addReward(parsed('addReward', { rolloutId: id, name, value: Math.round(random() * 100) / 100, source }));
    }
    // What training reads of the rollout: the rewards of its trajectory.
    const expected = episodeReward(store.trajectoriesOf([id])[0]!.rewards, policy);
    assert.equal(
      store.getRollout(id).reward,
      expected,
      `rollout ${i}: ${JSON.stringify(store.listRewards(id).map((r) => [r.source, r.name, r.value]))}`,
    );
    compared += expected === null ? 0 : 1;
  }
  assert.ok(compared > 100, 'most rollouts have an episode reward to compare');
});
