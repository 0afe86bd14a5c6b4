/**
 * The store's page size (trainer-daemon/store/database.ts): a new store's 16 KiB pages against SQLite's default
 * 4 KiB (what stores made by earlier builds keep), for the two kinds of commit the daemon makes — a batch of spans
 * into a long rollout (an OTLP export: its random span ids change pages all over the span-id index) and one span
 * (a proxied call). Each through the store's own write path, the commit timed apart from the inserts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { openConnection } from '../../trainer-daemon/store/driver';
import { Store } from '../../trainer-daemon/store/store';
import type { SpanInput } from '../../trainer-daemon/protocol';
import { parsed } from '../helpers/params';
import { llmSpan } from '../helpers/spans';
import { fmt, median, rows } from './table';

const ROLLOUT_SPANS = 61_440;
const BATCH = 512;
const ONE_SPAN_COMMITS = 2_000;
/** Rounds of the pair (4 KiB, then 16 KiB), each in fresh stores. */
const ROUNDS = 2;

/** A store file with `pageBytes` pages, made the way a store made by an earlier build was (WAL fixes the size). */
function storeWithPages(file: string, pageBytes: number | undefined): Store {
  if (pageBytes !== undefined) {
    const { db } = openConnection(file, { readonly: false });
    db.pragma(`page_size = ${pageBytes}`);
    db.pragma('journal_mode = WAL');
    db.close();
  }
  return Store.open(file);
}

/** Commit times (ms) of span batches into one rollout, the second half's (a rollout of 30,000–61,000 spans). */
function commits(store: Store, spans: readonly SpanInput[], batch: number): number[] {
  const rolloutId = store.createRollout(parsed('createRollout', {})).id;
  const begin = store.db.prepare('BEGIN IMMEDIATE');
  const commit = store.db.prepare('COMMIT');
  const times: number[] = [];
  for (let first = 0; first < spans.length; first += batch) {
    begin.run();
    store.addSpans({ rolloutId, spans: spans.slice(first, first + batch) });
    const started = performance.now();
    commit.run();
    if (first >= spans.length / 2) times.push(performance.now() - started);
  }
  return times;
}

function measure(dir: string, pageBytes: number | undefined): { batch: number; one: number; page: number } {
  const spans = Array.from({ length: ROLLOUT_SPANS }, () => llmSpan());
  // Fresh files each round (a folder of its own).
  dir = fs.mkdtempSync(path.join(dir, 'round-'));
  const batchStore = storeWithPages(path.join(dir, `batch-${pageBytes ?? 'new'}.db`), pageBytes);
  const page = Number(batchStore.db.pragma('page_size', { simple: true }));
  const batch = median(commits(batchStore, spans, BATCH));
  batchStore.close();
  const oneStore = storeWithPages(path.join(dir, `one-${pageBytes ?? 'new'}.db`), pageBytes);
  const one = median(commits(oneStore, spans.slice(0, ONE_SPAN_COMMITS * 2), 1));
  oneStore.close();
  return { batch, one, page };
}

export function pageSizeBenchmark(work: string): void {
  const dir = path.join(work, 'page-size');
  fs.mkdirSync(dir, { recursive: true });
  const old: Array<ReturnType<typeof measure>> = [];
  const fresh: Array<ReturnType<typeof measure>> = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    old.push(measure(dir, 4096));
    fresh.push(measure(dir, undefined));
  }
  const page = fresh[0]!.page;
  if (old.some((m) => m.page !== 4096))
    throw new Error(`the baseline stores have ${old[0]!.page}-byte pages, not 4,096`);
  const pick = (list: typeof old, key: 'batch' | 'one'): number => median(list.map((m) => m[key]));
  rows.push({
    metric: `store: commit of a ${BATCH}-span batch into a rollout of ${fmt(ROLLOUT_SPANS / 2)}–${fmt(ROLLOUT_SPANS)} spans (random span ids), a new store’s ${fmt(page / 1024)} KiB pages (median of ${ROUNDS} stores)`,
    result: `${fmt(pick(fresh, 'batch'), 2)} ms`,
    baseline: `${fmt(pick(old, 'batch'), 2)} ms (4 KiB pages: SQLite’s default, stores made before)`,
    ratio: `${fmt(pick(fresh, 'batch') / pick(old, 'batch'), 2)}×`,
    target: '(report)',
    met: '-',
  });
  rows.push({
    metric: `store: a one-span commit (a proxied call), a new store’s ${fmt(page / 1024)} KiB pages`,
    result: `${fmt(pick(fresh, 'one') * 1000)} µs`,
    baseline: `${fmt(pick(old, 'one') * 1000)} µs (4 KiB pages)`,
    ratio: `${fmt(pick(fresh, 'one') / pick(old, 'one'), 2)}×`,
    target: '(report)',
    met: '-',
  });
}
