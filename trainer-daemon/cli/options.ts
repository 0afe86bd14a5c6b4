/** Options shared by several commands. */
import path from 'node:path';
import { Option } from 'commander';

export interface GlobalOptions {
  store: string;
  json?: boolean;
}

export const DEFAULT_STORE = path.join('.lightning', 'store.db');

export function storeOption(): Option {
  return new Option('--store <file>', 'the store (SQLite file)')
    .env('LIGHTNING_STORE')
    .default(DEFAULT_STORE)
    .argParser((value: string) => path.resolve(value));
}

export function jsonOption(): Option {
  return new Option('--json', 'print JSON (validated by the protocol schemas) instead of text');
}

/** The store path as given or defaulted, absolute. */
export function resolveStore(options: GlobalOptions): string {
  return path.resolve(options.store);
}
