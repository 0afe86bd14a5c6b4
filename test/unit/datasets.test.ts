import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ConflictError, InvalidInputError } from '../../trainer-daemon/protocol/errors';
import { parseTasksJsonl } from '../../trainer-daemon/datasets/parse';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

const options = { expectedField: 'expected', valFraction: 0 };

describe('datasets', () => {
  test('tasks.jsonl: ids (given or numbered), the expected answer kept out of the input, splits', () => {
    const tasks = parseTasksJsonl(
      '{"id":7,"q":"2+2","expected":4}\n\n{"q":"3+3","expected":6,"split":"val"}\r\n{"q":"x"}\n',
      options,
    );
    assert.deepEqual(tasks, [
      { id: '7', split: 'train', input: { q: '2+2' }, expected: 4 },
      { id: 'task-2', split: 'val', input: { q: '3+3' }, expected: 6 },
      { id: 'task-3', split: 'train', input: { q: 'x' }, expected: null },
    ]);
    const custom = parseTasksJsonl('{"q":"2+2","answer":"4"}', { expectedField: 'answer', valFraction: 0 });
    assert.deepEqual(custom[0]!.input, { q: '2+2' });
    assert.equal(custom[0]!.expected, '4');
  });

  test('a validation fraction picks tasks stably by id', () => {
    const text = Array.from({ length: 400 }, (_, i) => JSON.stringify({ id: `t${i}` })).join('\n');
    const first = parseTasksJsonl(text, { expectedField: 'expected', valFraction: 0.25 });
    const again = parseTasksJsonl(text, { expectedField: 'expected', valFraction: 0.25 });
    assert.deepEqual(
      first.map((t) => t.split),
      again.map((t) => t.split),
    );
    const val = first.filter((t) => t.split === 'val').length;
    assert.ok(val > 60 && val < 140, `about a quarter in validation (${val})`);
  });

  test('bad lines are named: not JSON, not an object, repeated id, bad split, empty file', () => {
    const cases: Array<[string, RegExp]> = [
      ['{"a":1}\n{oops', /line 2: not valid JSON/],
      ['[1,2]', /line 1: expected a JSON object/],
      ['{"id":"a"}\n{"id":"b"}\n{"id":"a"}', /line 3: id "a" repeats line 1/],
      ['{"split":"holdout"}', /line 1: split must be train, val or test/],
      ['\n\n', /no tasks/],
    ];
    for (const [text, message] of cases)
      assert.throws(
        () => parseTasksJsonl(text, options),
        (error: unknown) => error instanceof InvalidInputError && message.test(error.message),
      );
  });

  test('an import is all or nothing; names are unique', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const created = store.importDataset({
      name: 'math',
      source: '/tmp/math.jsonl',
      tasks: parseTasksJsonl('{"q":1}\n{"q":2}', options),
    });
    assert.equal(created.taskCount, 2);
    assert.throws(
      () =>
        store.importDataset(
          parsed('importDataset', { name: 'math', tasks: [{ id: 'x', split: 'train', input: null, expected: null }] }),
        ),
      ConflictError,
    );
    assert.throws(() =>
      store.importDataset(
        parsed('importDataset', {
          name: 'dup',
          tasks: [
            { id: 'x', split: 'train', input: 1, expected: null },
            { id: 'x', split: 'train', input: 2, expected: null },
          ],
        }),
      ),
    );
    assert.deepEqual(
      store.listDatasets().map((d) => [d.name, d.taskCount]),
      [['math', 2]],
      'the failed imports left nothing',
    );
  });
});
