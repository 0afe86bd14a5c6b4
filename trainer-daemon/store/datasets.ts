/** Datasets and their tasks: imported in one transaction, never half a dataset. */
import crypto from 'node:crypto';
import type { Database, Statement } from './driver';
import type { z } from 'zod';
import type { Dataset, ImportDatasetParams, Json, Task } from '../protocol';
import { ConflictError, NotFoundError } from '../protocol/errors';

interface DatasetRow {
  id: string;
  name: string;
  source: string | null;
  created_at: number;
  task_count: number;
}

const SELECT = 'SELECT d.*, (SELECT count(*) FROM tasks t WHERE t.dataset_id = d.id) AS task_count FROM datasets d';

function rowToDataset(row: DatasetRow): Dataset {
  return { id: row.id, name: row.name, source: row.source, taskCount: row.task_count, createdAt: row.created_at };
}

export class DatasetRepository {
  private readonly insertDataset: Statement;
  private readonly insertTask: Statement;
  private readonly byName: Statement<[string], DatasetRow>;
  private readonly all: Statement<[], DatasetRow>;
  private readonly byId: Statement<[string], DatasetRow>;
  private readonly tasksOf: Statement<
    [string],
    { id: string; idx: number; split: Task['split']; input: string; expected: string | null }
  >;

  constructor(db: Database) {
    this.insertDataset = db.prepare('INSERT INTO datasets (id, name, source, created_at) VALUES (?, ?, ?, ?)');
    this.insertTask = db.prepare(
      'INSERT INTO tasks (dataset_id, id, idx, split, input, expected) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.byName = db.prepare(`${SELECT} WHERE d.name = ?`);
    this.all = db.prepare(`${SELECT} ORDER BY d.created_at DESC`);
    this.byId = db.prepare(`${SELECT} WHERE d.id = ?`);
    this.tasksOf = db.prepare('SELECT id, idx, split, input, expected FROM tasks WHERE dataset_id = ? ORDER BY idx');
  }

  /** Stores a dataset and all its tasks; must run inside a transaction. */
  create(params: z.output<typeof ImportDatasetParams>, now = Date.now()): Dataset {
    if (this.byName.get(params.name))
      throw new ConflictError(`a dataset named ${params.name} exists already; import under another --name`);
    const id = `ds-${crypto.randomBytes(6).toString('hex')}`;
    this.insertDataset.run(id, params.name, params.source, now);
    params.tasks.forEach((task, index) => {
      this.insertTask.run(
        id,
        task.id,
        index,
        task.split,
        JSON.stringify(task.input),
        task.expected === null ? null : JSON.stringify(task.expected),
      );
    });
    return rowToDataset(this.byName.get(params.name)!);
  }

  list(): Dataset[] {
    return this.all.all().map(rowToDataset);
  }

  /** A dataset (by id or name) and its tasks in file order. */
  tasks(dataset: string, split?: Task['split']): { dataset: Dataset; items: Task[] } {
    const row = this.byName.get(dataset) ?? this.byId.get(dataset);
    if (!row) throw new NotFoundError(`dataset ${dataset} does not exist (see \`lightning dataset list\`)`);
    const rows = this.tasksOf.all(row.id).filter((task) => split === undefined || task.split === split);
    return {
      dataset: rowToDataset(row),
      items: rows.map((task) => ({
        datasetId: row.id,
        id: task.id,
        index: task.idx,
        split: task.split,
        input: JSON.parse(task.input) as Json,
        expected: task.expected === null ? null : (JSON.parse(task.expected) as Json),
      })),
    };
  }
}
