import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { lineDiff } from '../../trainer-daemon/apo/diff';
import { parseEdit } from '../../trainer-daemon/apo/prompts';
import { SeededRandom } from '../../trainer-daemon/util/random';
import { apoScoring } from '../../trainer-daemon/apo/reward';
import { endLines, roundLine } from '../../trainer-daemon/apo/roundLines';
import {
  ApoConfig,
  applyTextEdit,
  decodeLiteral,
  literalKind,
  placeholders,
  promptEdit,
  type ApoCandidate,
  type ApoResult,
  type Json,
} from '../../trainer-daemon/protocol';
import { parseSpec } from '../../trainer-daemon/rewards/config';
import { RewardScorer } from '../../trainer-daemon/rewards/scorer';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';
import { testApoConfig } from '../helpers/trainingConfigs';

/** Marks `prompt` (as written in `file`) the way the editor does: offsets and the source text there. */
function mark(file: string, sourceText: string): { start: number; end: number; sourceText: string } {
  const start = file.indexOf(sourceText);
  assert.ok(start >= 0);
  return { start, end: start + sourceText.length, sourceText };
}

describe('apo: Apply writes the new prompt into the source', () => {
  const NEW = 'Add {a} and {b}.\nAnswer with "digits" only.';

  test('a prompt file is replaced whole, as plain text', () => {
    const file = 'Add {a} and {b}.';
    const edit = promptEdit(file, { start: 0, end: file.length, sourceText: file }, NEW);
    assert.deepEqual(edit, { start: 0, end: file.length, newText: NEW });
  });

  test('inside a double-quoted string: escaped for it; the rest of the file untouched', () => {
    const file = 'const SYSTEM = "Add {a} and {b}.";\nconsole.log(SYSTEM);\n';
    const edit = promptEdit(file, mark(file, 'Add {a} and {b}.'), NEW);
    assert.equal(
      applyTextEdit(file, edit),
      'const SYSTEM = "Add {a} and {b}.\\nAnswer with \\"digits\\" only.";\nconsole.log(SYSTEM);\n',
    );
  });

  test('inside single quotes, template literals and Python triple quotes', () => {
    const single = "s = 'It\\'s {a}'";
    assert.equal(
      applyTextEdit(single, promptEdit(single, mark(single, "It\\'s {a}"), "It's {a}, isn't it")),
      "s = 'It\\'s {a}, isn\\'t it'",
    );
    const template = 'const p = `Sum ${x}: {a}`;';
    assert.equal(literalKind(template, template.indexOf('Sum'), template.indexOf('`;')), '`');
    assert.equal(
      applyTextEdit(template, promptEdit(template, mark(template, 'Sum ${x}: {a}'), 'Total `${y}` {a}')),
      'const p = `Total \\`\\${y}\\` {a}`;',
    );
    const python = 'PROMPT = """Add {a}\nand {b}."""\n';
    assert.equal(
      applyTextEdit(
        python,
        promptEdit(python, mark(python, 'Add {a}\nand {b}.'), 'Add {a} and {b}.\nSay """digits""".'),
      ),
      'PROMPT = """Add {a} and {b}.\nSay \\"""digits\\"""."""\n',
    );
  });

  test('the file changed above the prompt: found again by its text; gone or ambiguous: a clear error', () => {
    const before = 'const SYSTEM = "Add {a} and {b}.";';
    const location = mark(before, 'Add {a} and {b}.');
    const after = `// a new comment\n${before}`;
    assert.equal(
      applyTextEdit(after, promptEdit(after, location, 'Sum {a} and {b}.')),
      '// a new comment\nconst SYSTEM = "Sum {a} and {b}.";',
    );
    assert.throws(() => promptEdit('const SYSTEM = "Other";', location, 'x'), /no longer in the file/);
    assert.throws(() => promptEdit(`${after}\n${before}`, location, 'x'), /more than once/);
  });

  test('a literal decodes to the prompt it stands for', () => {
    assert.equal(decodeLiteral('Line\\nTwo \\"q\\" \\u00e9', '"'), 'Line\nTwo "q" é');
    assert.equal(decodeLiteral('raw\\n', 'plain'), 'raw\\n');
  });
});

describe('apo: pieces of the loop', () => {
  test('placeholders are the distinct {names}; an edit dropping or adding one is refused', () => {
    assert.deepEqual(placeholders('Hi {name}, {name} asked about {topic}; {0} and { x } are not placeholders'), [
      'name',
      'topic',
    ]);
    assert.equal(
      parseEdit('Here:\n<prompt>\nHello {name}. Be brief.\n</prompt>', 'Hello {name}.'),
      'Hello {name}. Be brief.',
    );
    assert.throws(() => parseEdit('<prompt>\nHello. Be brief.\n</prompt>', 'Hello {name}.'), /dropped \{name\}/);
    assert.throws(() => parseEdit('<prompt>\nHello {name} from {city}.\n</prompt>', 'Hello {name}.'), /added \{city\}/);
    assert.throws(() => parseEdit('Hello {name}. Be brief.', 'Hello {name}.'), /between <prompt> and <\/prompt>/);
    assert.throws(() => parseEdit('<prompt>\nHello {name}.\n</prompt>', 'Hello {name}.'), /unchanged/);
  });

  test('without a rewards file APO scores with a match rule of the final answer; with one (given, or beside the store) with that file', async (t) => {
    const dir = tempDir(t);
    const storeFile = path.join(dir, '.lightning', 'store.db');
    fs.mkdirSync(path.dirname(storeFile));
    const score = async (match: ApoConfig['match'], answer: string, expected: Json): Promise<number | null> => {
      const scoring = apoScoring(testApoConfig({ resource: 'p', dataset: 'd', match }), storeFile, {})!;
      assert.ok('spec' in scoring.source);
      const scorer = await RewardScorer.prepare(parseSpec(scoring.source.spec, scoring.source.baseDir));
      const trajectory = {
        rolloutId: 'r',
        status: 'succeeded' as const,
        error: null,
        finalAnswer: answer,
        calls: [],
        toolCalls: [],
        steps: 1,
        promptTokens: 0,
        completionTokens: 0,
        errorSpans: 0,
      };
      return (await scorer.score([{ trajectory, task: { id: 't', input: null, expected } }]))[0]!.value;
    };
    assert.equal(await score('normalized', 'Paris.', 'paris'), 1);
    assert.equal(await score('normalized', 'It is Paris.', 'paris'), 0);
    assert.equal(await score('contains', 'It is Paris.', 'paris'), 1);
    assert.equal(await score('contains', 'Parisian', 'paris'), 0);
    assert.equal(await score('normalized', '42', 42), 1);
    assert.equal(apoScoring(testApoConfig({ resource: 'p', dataset: 'd', match: 'none' }), storeFile, {}), undefined);

    const rules = {
      default: { sources: [{ type: 'judge', model: 'm', rubric: 'r', apiKeyEnv: 'JUDGE', mode: 'relative' }] },
    };
    fs.writeFileSync(path.join(dir, '.lightning', 'rewards.json'), JSON.stringify(rules));
    const fromFile = apoScoring(testApoConfig({ resource: 'p', dataset: 'd', match: 'none' }), storeFile, {
      JUDGE: 'k',
    })!;
    assert.deepEqual(fromFile, {
      source: { rewardsFile: path.join(dir, '.lightning', 'rewards.json') },
      apiKeys: { JUDGE: 'k' },
      atEnd: true,
    });
    assert.throws(
      () =>
        apoScoring(
          testApoConfig({ resource: 'p', dataset: 'd', rewardsFile: path.join(dir, 'missing.json') }),
          storeFile,
          {},
        ),
      /no rewards config at .*missing\.json/,
    );
  });

  test('seeded sampling repeats for a seed and differs across seeds', () => {
    const items = Array.from({ length: 20 }, (_, i) => i);
    assert.deepEqual(new SeededRandom(1).sample(items, 5), new SeededRandom(1).sample(items, 5));
    assert.notDeepEqual(new SeededRandom(1).sample(items, 5), new SeededRandom(2).sample(items, 5));
    assert.equal(new SeededRandom(1).sample(items, 50).length, 20);
  });

  test('what `train --algorithm apo` prints while it follows the run: a line per round from its metrics and leaderboard, then the skips and why it stopped', () => {
    const candidate = (
      id: string,
      round: number,
      batchScore: number | null,
      valScore: number | null,
    ): ApoCandidate => ({
      id,
      runId: 'run-1',
      round,
      parentId: round === 0 ? null : 'seed',
      resourceName: 'prompt',
      version: 1,
      prompt: 'p',
      critique: null,
      critiqueStyle: null,
      batchScore,
      valScore,
      rollouts: 4,
      createdAt: round,
    });
    // r1-1 and r1-2 tie on the full validation set; the leader is the one its beam ranked first (the batch score).
    const board = [
      candidate('r1-1', 1, 0.5, 1),
      candidate('r1-2', 1, 1, 1),
      candidate('seed', 0, 0.5, 0.5),
      candidate('r2-3', 2, 0.25, null),
    ];
    assert.equal(
      roundLine(0, { best_val_score: 0.5, rollouts: 4 }, board),
      'round 0: seed scores 0.500 on 4 validation tasks',
    );
    assert.equal(
      roundLine(
        1,
        {
          best_val_score: 1,
          leader_val_score: 1,
          candidates: 2,
          skipped: 1,
          llm_calls: 7,
          rollouts: 20,
          'skipped_calls/upstream_errors': 3,
        },
        board,
      ),
      'round 1: 2 new candidate(s), 1 branch(es) skipped; leader r1-2 1.000, best r1-1 1.000 (seed 0.500); 7 LLM calls, 20 rollouts; agent calls skipped: 3 upstream errors (not whole answers)',
    );
    const result: ApoResult = {
      runId: 'run-1',
      resource: 'prompt',
      seed: { candidateId: 'seed', version: 1, prompt: 'a', valScore: 0.5 },
      best: { candidateId: 'r1-1', version: 2, prompt: 'b', valScore: 1 },
      diff: '',
      roundsCompleted: 1,
      llmCalls: 3,
      rollouts: 20,
      stopReason: 'budget-calls',
      skipped: [{ round: 1, parentId: 'seed', stage: 'edit', error: 'no <prompt> tags' }],
    };
    assert.deepEqual(endLines(result, { budgetCalls: 3, budgetRollouts: 100 }), [
      'round 1: skipped a branch of seed: edit failed: no <prompt> tags',
      'stopped: the budget of 3 LLM calls is spent',
    ]);
    assert.deepEqual(
      endLines({ ...result, stopReason: 'completed', skipped: [] }, { budgetCalls: 3, budgetRollouts: 100 }),
      [],
    );
  });

  test('the line diff marks added and removed lines', () => {
    assert.equal(lineDiff('a\nb\nc', 'a\nB\nc\nd'), '  a\n- b\n+ B\n  c\n+ d');
    assert.equal(lineDiff('same', 'same'), '');
  });
});

describe('apo: resources in the store', () => {
  test('versions, the current one, rollouts pinned to a version, and optimizer rollouts', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    assert.equal(
      store.putResource(parsed('putResource', { name: 'prompt', kind: 'prompt_template', value: 'v1 {a}' })).version,
      1,
    );
    const candidate = store.putResource({
      name: 'prompt',
      kind: 'prompt_template',
      value: 'v2 {a}',
      current: false,
      runId: 'run-1',
    });
    assert.deepEqual([candidate.version, candidate.current, candidate.runId], [2, false, 'run-1']);
    assert.equal(store.agentResources(null).resources.prompt!.value, 'v1 {a}');
    const pinned = store.createRollout(parsed('createRollout', { mode: 'val', resources: { prompt: 2 } }));
    const plain = store.createRollout(parsed('createRollout', { mode: 'optimizer' }));
    assert.equal(store.agentResources(pinned.id).resources.prompt!.value, 'v2 {a}');
    assert.equal(store.agentResources(plain.id).resources.prompt!.version, 1);
    assert.deepEqual(store.getRolloutDetail(pinned.id).resources, { prompt: 2 });
    // A rollout records (and keeps reading) what was current when it was created, even after a change.
    store.putResource(parsed('putResource', { name: 'prompt', kind: 'prompt_template', value: 'v3 {a}' }));
    store.putResource(parsed('putResource', { name: 'other', kind: 'json', value: { k: 1 } }));
    assert.deepEqual(store.getRolloutDetail(plain.id).resources, { prompt: 1 });
    assert.deepEqual(Object.keys(store.agentResources(plain.id).resources), ['other', 'prompt']);
    assert.equal(store.agentResources(plain.id).resources.prompt!.version, 1);
    assert.equal(store.agentResources(null).resources.prompt!.version, 3);
    assert.throws(
      () => store.createRollout(parsed('createRollout', { resources: { prompt: 9 } })),
      /params\.resources\.prompt: resource prompt has no version 9/,
    );
    assert.equal(
      store.listRollouts(parsed('listRollouts', {})).items.length,
      2,
      'a refused pin leaves no rollout behind',
    );
    assert.equal(store.setCurrentResource('prompt', 2).current, true);
    assert.deepEqual(store.listResources(), [
      { name: 'other', kind: 'json', currentVersion: 1, latestVersion: 1, versions: 1 },
      { name: 'prompt', kind: 'prompt_template', currentVersion: 2, latestVersion: 3, versions: 3 },
    ]);
    assert.deepEqual(
      store.getResource('prompt').versions.map((v) => [v.version, v.current]),
      [
        [1, false],
        [2, true],
        [3, false],
      ],
    );
  });
});
