/**
 * trainer-daemon/python/PROTOCOL.md is the worker contract as people read it: each method's bullet names every field
 * its params and its result carry in the daemon's zod schemas (WorkerMethods), so a field added on one side and not
 * described fails here. (The fields' types and required-ness are workerContract.test.ts's, against the Python side.)
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { z } from 'zod';
import { WorkerMethods } from '../../trainer-daemon/protocol';

const DOC = fs.readFileSync(path.join(__dirname, '../../trainer-daemon/python/PROTOCOL.md'), 'utf8');

/** Each method's bullet in the "Methods" section: from `* **name**` to the next method's bullet or section. */
function methodSections(doc: string): Map<string, string> {
  const start = doc.indexOf('## Methods');
  const end = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, end === -1 ? undefined : end);
  const sections = new Map<string, string>();
  for (const part of section.split(/\n(?=\* \*\*)/).slice(1)) {
    const name = /^\* \*\*(\w+)\*\*/.exec(part)?.[1];
    if (name) sections.set(name, part);
  }
  return sections;
}

/** The top-level field names of a zod object schema (none for anything else). */
function fieldsOf(schema: z.ZodType): string[] {
  return schema instanceof z.ZodObject ? Object.keys(schema.shape) : [];
}

/**
 * The fields of each method's params and result that its bullet does not name in its code spans (as `field:`,
 * `field?`, `field,` or `field}`): a word of the prose does not count.
 */
function undocumented(doc: string, methods: Record<string, { params: z.ZodType; result: z.ZodType }>): string[] {
  const sections = methodSections(doc);
  return Object.entries(methods).flatMap(([method, spec]) => {
    const text = sections.get(method);
    if (text === undefined) return [`${method}: no bullet`];
    const code = [...text.matchAll(/`([^`]*)`/g)].map((match) => match[1]).join('\n');
    return (['params', 'result'] as const).flatMap((side) =>
      fieldsOf(spec[side])
        .filter((field) => !new RegExp(`(?<![\\w.])${field}\\??(?=\\s*[:,}\\]])`).test(code))
        .map((field) => `${method}.${side}.${field}`),
    );
  });
}

test('PROTOCOL.md describes every worker method and every field of its params and result', () => {
  assert.deepEqual(undocumented(DOC, WorkerMethods), []);
});

test('the check fails on a method or a field the document leaves out', () => {
  const methods = {
    save: { params: z.object({ dir: z.string(), compress: z.boolean() }), result: z.object({ path: z.string() }) },
    rename: { params: z.object({}), result: z.object({}) },
  };
  // `compress` in the prose only: not named.
  const doc = '## Methods\n\n* **save** `{dir}` → `{path}`; compress is not a field\n\n## Serving\n';
  assert.deepEqual(undocumented(doc, methods), ['save.params.compress', 'rename: no bullet']);
});
