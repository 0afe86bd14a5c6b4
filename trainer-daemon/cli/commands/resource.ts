/** `lightning resource put|list|get|set-current`: versioned resources (prompt templates agents read at run time). */
import fs from 'node:fs';
import type { Command } from 'commander';
import { errorMessage, InvalidInputError, NotFoundError } from '../../protocol/errors';
import { Json, placeholders } from '../../protocol';
import { openBackend } from '../backend';
import { positiveInt } from './datasetRun';
import { table, time } from '../textTable';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface PutOptions extends GlobalOptions {
  file?: string;
  value?: string;
  kind: 'prompt_template' | 'json';
  notCurrent?: boolean;
}

function readValue(options: PutOptions): Json {
  if ((options.file === undefined) === (options.value === undefined))
    throw new InvalidInputError('give the value with exactly one of --file FILE or --value TEXT');
  let text = options.value;
  if (options.file !== undefined) {
    try {
      text = fs.readFileSync(options.file, 'utf8');
    } catch (error) {
      throw new NotFoundError(`cannot read ${options.file}: ${errorMessage(error)}`);
    }
  }
  if (options.kind === 'prompt_template') return text!;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text!);
  } catch (error) {
    throw new InvalidInputError(`${options.file ?? '--value'}: not valid JSON (${errorMessage(error)})`);
  }
  const json = Json.safeParse(parsed);
  // JSON.parse reads 1e309 as Infinity, which no JSON value holds: said in words, not as the schema's issues.
  if (!json.success)
    throw new InvalidInputError(
      `${options.file ?? '--value'}: not valid JSON (a number too large to hold, such as 1e309)`,
    );
  return json.data;
}

export function registerResource(program: Command): void {
  const resource = program
    .command('resource')
    .description(
      'versioned resources: prompt templates ({name} placeholders) and JSON values that agents read from GET $LIGHTNING_URL/resources',
    );
  resource
    .command('put')
    .description('store the next version of a resource (it becomes the current one)')
    .argument('<name>', 'resource name')
    .addOption(storeOption())
    .addOption(jsonOption())
    .option('--file <file>', 'read the value from a file')
    .option('--value <text>', 'the value')
    .option('--kind <kind>', 'prompt_template | json', 'prompt_template')
    .option('--not-current', 'keep it as a version without making it current')
    .action(async (name: string, options: PutOptions) => {
      if (options.kind !== 'prompt_template' && options.kind !== 'json')
        throw new InvalidInputError(`--kind ${String(options.kind)}: expected prompt_template or json`);
      const value = readValue(options);
      const backend = await openBackend(resolveStore(options), { create: true });
      try {
        const put = await backend.call(
          'putResource',
          options.kind === 'json'
            ? { name, kind: 'json', value, current: !options.notCurrent }
            : { name, kind: 'prompt_template', value: value as string, current: !options.notCurrent },
        );
        const holes = typeof put.value === 'string' ? placeholders(put.value) : [];
        process.stdout.write(
          options.json
            ? `${JSON.stringify(put)}\n`
            : `${name} version ${put.version}${put.current ? ' (current)' : ''}${holes.length ? `; placeholders {${holes.join('}, {')}}` : ''}\n`,
        );
      } finally {
        backend.close();
      }
    });
  resource
    .command('list')
    .description('every resource with its current and latest version')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (options: GlobalOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const { items } = await backend.call('listResources', {});
        process.stdout.write(
          options.json
            ? `${JSON.stringify(items)}\n`
            : `${table(
                ['NAME', 'KIND', 'CURRENT', 'LATEST', 'VERSIONS'],
                items.map((r) => [
                  r.name,
                  r.kind,
                  String(r.currentVersion),
                  String(r.latestVersion),
                  String(r.versions),
                ]),
              )}\n`,
        );
      } finally {
        backend.close();
      }
    });
  resource
    .command('get')
    .description('print a version of a resource (default: the current one)')
    .argument('<name>', 'resource name')
    .option('--version <n>', 'this version')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (name: string, options: GlobalOptions & { version?: string }) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const got = await backend.call('getResource', {
          name,
          version: options.version === undefined ? undefined : positiveInt(options.version, '--version'),
        });
        if (options.json) process.stdout.write(`${JSON.stringify(got)}\n`);
        else {
          process.stdout.write(
            `${typeof got.resource.value === 'string' ? got.resource.value : JSON.stringify(got.resource.value, null, 2)}\n`,
          );
          process.stderr.write(
            `${name} version ${got.resource.version} of ${got.versions.length}, ${time(got.resource.createdAt)}${got.resource.runId ? `, from ${got.resource.runId}` : ''}\n`,
          );
        }
      } finally {
        backend.close();
      }
    });
  resource
    .command('set-current')
    .description('make a version the current one (e.g. the best prompt of an APO run)')
    .argument('<name>', 'resource name')
    .argument('<version>', 'the version')
    .addOption(storeOption())
    .addOption(jsonOption())
    .action(async (name: string, version: string, options: GlobalOptions) => {
      const backend = await openBackend(resolveStore(options));
      try {
        const current = await backend.call('setCurrentResource', { name, version: positiveInt(version, 'version') });
        process.stdout.write(
          options.json ? `${JSON.stringify(current)}\n` : `${name}: version ${current.version} is current\n`,
        );
      } finally {
        backend.close();
      }
    });
}
