/**
 * `lightning train --algorithm sft` refuses bad input before a run is recorded or a trainer starts, each with a
 * message naming the flag and the fix: nothing rated high enough (with what was rated and how), a fraction out of
 * range, an agent command (SFT learns from recorded rollouts), a regular expression that is not one, an unknown
 * dataset, the flags of other algorithms and another algorithm's use of SFT's flags. The rollouts are real ones,
 * recorded through the proxy by `lightning dataset run` against the scripted teacher.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { RATED_TASKS, recordRatedRollouts, startTeacher } from '../helpers/ratedRollouts';
import { tempDir } from '../helpers/tmp';

test('sft: bad input is refused with the flag and the fix, and no run is recorded', async (t) => {
  const cwd = tempDir(t);
  const teacher = await startTeacher();
  t.after(() => teacher.close());
  await recordRatedRollouts(cwd, teacher);
  const sft = (...args: string[]) => runCli(['train', '--algorithm', 'sft', ...args], { cwd });

  const tooHigh = await sft('--model', 'tiny', '--min-reward', '2');
  assert.equal(tooHigh.code, 2, tooHigh.stderr);
  assert.match(
    tooHigh.stderr,
    new RegExp(
      `no rated rollout to fine-tune on: ${RATED_TASKS.length * 2} rollout\\(s\\) are rated below --min-reward 2`,
    ),
  );
  const otherName = await sft('--model', 'tiny', '--reward-name', 'helpful');
  assert.equal(otherName.code, 2);
  assert.match(otherName.stderr, /have no "helpful" reward \(rate them: Good in the panel, or lightning reward ID 1\)/);
  const noModel = await sft();
  assert.equal(noModel.code, 2);
  assert.match(noModel.stderr, /--model is required: tiny \(the built-in policy\) or a Hugging Face model/);
  const fraction = await sft('--model', 'tiny', '--val-fraction', '0.9');
  assert.equal(fraction.code, 2);
  assert.match(fraction.stderr, /--val-fraction: .*0\.5/);
  const notNumber = await sft('--model', 'tiny', '--epochs', 'many');
  assert.equal(notNumber.code, 2);
  assert.match(notNumber.stderr, /--epochs: /);
  const command = await sft('--model', 'tiny', '--', 'node', 'agent.mjs');
  assert.equal(command.code, 2);
  assert.match(
    command.stderr,
    /--algorithm sft fine-tunes on rollouts already recorded and rated: give no agent command/,
  );
  const regex = await sft('--model', 'tiny', '--agent', '(');
  assert.equal(regex.code, 2);
  assert.match(regex.stderr, /--agent: not a regular expression/);
  const dataset = await sft('--model', 'tiny', '--dataset', 'nope');
  assert.notEqual(dataset.code, 0);
  assert.match(dataset.stderr, /dataset nope does not exist/);

  // One command for every algorithm: the others' flags are refused with SFT, SFT's with the others.
  const grpoFlag = await sft('--model', 'tiny', '--iterations', '3');
  assert.equal(grpoFlag.code, 2);
  assert.match(grpoFlag.stderr, /--iterations: applies to --algorithm grpo only \(this run is --algorithm sft\)/);
  const valFlag = await sft('--model', 'tiny', '--val', 'rated');
  assert.match(valFlag.stderr, /--val: applies to --algorithm grpo and apo only/);
  const sftFlag = await runCli(
    ['train', '--model', 'tiny', '--dataset', 'rated', '--min-reward', '1', '--', 'node', 'agent.mjs'],
    { cwd },
  );
  assert.equal(sftFlag.code, 2);
  assert.match(sftFlag.stderr, /--min-reward: applies to --algorithm sft only \(this run is --algorithm grpo\)/);

  // --resume continues a run as it was configured: what would configure it is refused, not ignored.
  const resumed = await sft('--resume', 'train-x', '--epochs', '10', '--lr', '1e-3');
  assert.equal(resumed.code, 2, resumed.stderr);
  assert.match(
    resumed.stderr,
    /--resume train-x continues that run with the configuration it started with: .*--epochs/,
  );
  assert.match(resumed.stderr, /--lr/);
  const resumedAgent = await runCli(['train', '--resume', 'train-x', '--', 'node', 'agent.mjs'], { cwd });
  assert.equal(resumedAgent.code, 2, resumedAgent.stderr);
  assert.match(resumedAgent.stderr, /an agent command would change nothing/);

  const listed = await runCli(['train', '--list', '--json'], { cwd });
  assert.equal(listed.code, 0, listed.stderr);
  assert.deepEqual(JSON.parse(listed.stdout), [], 'no run was recorded');
});
