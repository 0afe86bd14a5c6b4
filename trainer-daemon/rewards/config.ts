/**
 * The rewards config file (`.lightning/rewards.json` beside the store, or any file given with
 * `--config`): a `default` spec and specs per dataset. Read and checked where it enters the
 * process; every error names the file and the field. Sources get default names here, and names
 * must be unique, so every reward row says which source wrote it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describeIssues, RewardsFile, RewardSpec, type RewardSourceConfig } from '../protocol';
import { InvalidInputError, NotFoundError } from '../protocol/errors';
import { assertNever } from '../protocol/assert';
import { parseJsonText, readFileBounded } from '../util/readFileBounded';

/** A rewards file is a few specs: anything larger is not one. */
const MAX_REWARDS_FILE_BYTES = 1024 * 1024;

/** A spec whose sources all have names, with the folder its relative paths start from. */
export interface ResolvedSpec {
  readonly spec: RewardSpec;
  readonly names: readonly string[];
  readonly baseDir: string;
}

export const DEFAULT_REWARDS_FILE = 'rewards.json';

/** The default name of a source: what it is, e.g. `rule.exact`, `function.reward`, `judge`, `model`. */
function defaultName(source: RewardSourceConfig): string {
  switch (source.type) {
    case 'rule':
      return `rule.${source.rule.rule}`;
    case 'function':
      return `function.${path.basename(source.module).replace(/\.[^.]*$/, '')}`.replace(/[^A-Za-z0-9_.:-]/g, '_');
    case 'judge':
      return 'judge';
    case 'model':
      return 'model';
    default:
      return assertNever(source);
  }
}

export function resolveSpec(spec: RewardSpec, baseDir: string, where: string): ResolvedSpec {
  const names = spec.sources.map((source) => source.name ?? defaultName(source));
  names.forEach((name, i) => {
    if (name === spec.name)
      throw new InvalidInputError(
        `${where}.sources.${i}.name: ${name} is the combined reward's name; give the source another name`,
      );
    const first = names.indexOf(name);
    if (first !== i)
      throw new InvalidInputError(
        `${where}.sources.${i}.name: sources ${first} and ${i} are both named ${name}; give each a distinct name`,
      );
  });
  return { spec, names, baseDir };
}

/** Checks an inline spec (from the RPC or a run configuration). */
export function parseSpec(raw: unknown, baseDir: string, where = 'spec'): ResolvedSpec {
  const parsed = RewardSpec.safeParse(raw);
  if (!parsed.success) throw new InvalidInputError(describeIssues(parsed.error, where));
  return resolveSpec(parsed.data, baseDir, where);
}

export interface LoadedRewardsFile {
  readonly file: string;
  readonly default: ResolvedSpec | undefined;
  /** By dataset name or id, as written in the file. */
  readonly datasets: ReadonlyMap<string, ResolvedSpec>;
}

export function loadRewardsFile(file: string): LoadedRewardsFile {
  if (!fs.existsSync(file)) {
    throw new NotFoundError(
      `no rewards config at ${file}: write one (see docs/rewards.md, "Automatic rewards") or name another file (lightning score --config, --rewards elsewhere)`,
    );
  }
  const raw = parseJsonText(readFileBounded(file, MAX_REWARDS_FILE_BYTES, 'rewards file'), file);
  const parsed = RewardsFile.safeParse(raw);
  if (!parsed.success) throw new InvalidInputError(`${file}: ${describeIssues(parsed.error, '')}`);
  const baseDir = path.dirname(path.resolve(file));
  return {
    file,
    default: parsed.data.default && resolveSpec(parsed.data.default, baseDir, `${file}: default`),
    datasets: new Map(
      Object.entries(parsed.data.datasets).map(([name, spec]) => [
        name,
        resolveSpec(spec, baseDir, `${file}: datasets.${name}`),
      ]),
    ),
  };
}

/** The rewards file used when none is named: `rewards.json` beside the store. */
export function defaultRewardsFile(storeFile: string): string {
  return path.join(path.dirname(storeFile), DEFAULT_REWARDS_FILE);
}

/** A dataset's spec in the file (by id, else by name), else the file's default. */
export function specForDataset(
  file: LoadedRewardsFile,
  dataset: { readonly id: string; readonly name: string } | undefined,
): ResolvedSpec | undefined {
  const byDataset = dataset && (file.datasets.get(dataset.id) ?? file.datasets.get(dataset.name));
  return byDataset ?? file.default;
}

/** Every spec of a file: its default, then the datasets'. */
export function allSpecs(file: LoadedRewardsFile): ResolvedSpec[] {
  return [...(file.default ? [file.default] : []), ...file.datasets.values()];
}

/** The judge API keys a file's specs name, from `env` (the caller's: the daemon may not share it); never stored. */
export function judgeKeys(file: LoadedRewardsFile, env: NodeJS.ProcessEnv): Record<string, string> {
  const names = allSpecs(file).flatMap((s) =>
    s.spec.sources.flatMap((source) => (source.type === 'judge' ? [source.apiKeyEnv] : [])),
  );
  return Object.fromEntries(names.flatMap((name) => (env[name] ? [[name, env[name]]] : [])));
}
