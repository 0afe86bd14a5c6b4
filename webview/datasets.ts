/**
 * The panel's Datasets section: every imported dataset with its task count and splits, collapsible;
 * "Rollouts" shows that dataset's rollouts in the list, and the scope line above the list says which
 * dataset or batch the list is narrowed to, with a button to clear it.
 */
import { button, el } from './dom';
import type { DatasetRow, RolloutFilter } from '../trainer-daemon/protocol/ui/panelMessages';

export interface DatasetActions {
  /** Narrows the list to a dataset's or a batch's rollouts (undefined: everything). */
  scope(scope: Pick<RolloutFilter, 'datasetId' | 'batchId'>): void;
}

export class DatasetsSection {
  private readonly details = el('details', 'datasets');
  private readonly summary = el('summary', undefined, 'Datasets');
  private readonly body = el('div', 'dataset-rows');
  private readonly scopeLine = el('div', 'scope');
  private names = new Map<string, string>();

  constructor(
    container: HTMLElement,
    private readonly actions: DatasetActions,
  ) {
    this.details.append(this.summary, this.body);
    this.body.append(el('div', 'muted', 'Loading datasets…'));
    this.scopeLine.hidden = true;
    container.append(this.details, this.scopeLine);
  }

  show(rows: readonly DatasetRow[]): void {
    this.names = new Map(rows.map((row) => [row.dataset.id, row.dataset.name]));
    this.summary.textContent = `Datasets (${rows.length})`;
    this.body.replaceChildren();
    if (rows.length === 0)
      return void this.body.append(
        el('div', 'muted', 'No datasets. Import a tasks.jsonl with Lightning: Import Dataset.'),
      );
    for (const { dataset, splits } of rows) {
      const row = el('div', 'dataset-row');
      row.dataset.datasetId = dataset.id;
      const counts = (['train', 'val', 'test'] as const)
        .filter((split) => splits[split] > 0)
        .map((split) => `${splits[split]} ${split}`)
        .join(' · ');
      row.append(
        el('span', 'dataset-name', dataset.name),
        el('span', 'muted', ` ${dataset.taskCount} tasks (${counts})`),
        button(
          'Rollouts',
          `Show the rollouts of ${dataset.name}`,
          () => this.actions.scope({ datasetId: dataset.id }),
          'dataset-rollouts',
        ),
      );
      row.title = dataset.source ?? dataset.id;
      this.body.append(row);
    }
  }

  /** Says what the list is narrowed to. */
  showScope(filter: RolloutFilter): void {
    const what = filter.batchId
      ? `batch ${filter.batchId}`
      : filter.datasetId
        ? `dataset ${this.names.get(filter.datasetId) ?? filter.datasetId}`
        : undefined;
    this.scopeLine.hidden = what === undefined;
    if (what === undefined) return;
    this.scopeLine.replaceChildren(
      el('span', undefined, `Showing ${what}`),
      button('$(close)', 'Show every rollout', () => this.actions.scope({}), 'clear-scope'),
    );
  }
}
