// The trainer worker's params exist twice: zod schemas on the daemon's side (protocol/trainer.ts) and dataclasses
// on the Python side (python/lightning_trainer/params.py). Both are read here as one small shape — z.toJSONSchema
// on one side, `python3 -m lightning_trainer.schema` on the other — and compared method by method, so a field
// added, renamed, retyped or made required on one side only fails this test.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, test } from 'node:test';
import { z } from 'zod';
import { WorkerMethods } from '../../trainer-daemon/protocol/trainer';

/** `lightning_trainer.schema.describe`'s shape. */
interface Shape {
  type?: 'boolean' | 'integer' | 'number' | 'string' | 'object' | 'array' | 'any';
  enum?: unknown[];
  items?: Shape;
  fields?: Record<string, { shape: Shape; required: boolean }>;
  union?: Record<string, Shape>;
  nullable?: boolean;
}
type JsonSchema = Record<string, unknown> & {
  type?: string;
  const?: unknown;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  items?: JsonSchema;
  properties?: Record<string, JsonSchema>;
  required?: string[];
};

/** A zod JSON schema read as the shape the Python side describes. */
function shapeOf(schema: JsonSchema): Shape {
  const options = schema.anyOf ?? schema.oneOf;
  if (options) {
    const nonNull = options.filter((option) => option.type !== 'null');
    const nullable = nonNull.length < options.length ? { nullable: true } : {};
    if (nonNull.every((option) => 'const' in option))
      return { enum: sortByRepr(nonNull.map((option) => option.const)), ...nullable };
    if (nonNull.length === 1) return { ...shapeOf(nonNull[0]!), ...nullable };
    const union: Record<string, Shape> = {};
    for (const option of nonNull) {
      const kind = option.properties?.kind?.const;
      assert.equal(typeof kind, 'string', `a union's options are told apart by kind: ${JSON.stringify(option)}`);
      union[kind as string] = shapeOf(option);
    }
    return { union, ...nullable };
  }
  if ('const' in schema) return { enum: [schema.const] };
  if (schema.enum) return { enum: sortByRepr(schema.enum) };
  switch (schema.type) {
    case 'boolean':
    case 'integer':
    case 'number':
    case 'string':
      return { type: schema.type };
    case 'array':
      return { type: 'array', items: schema.items ? shapeOf(schema.items) : { type: 'any' } };
    case 'object': {
      if (!schema.properties) return { type: 'object' };
      const required = new Set(schema.required ?? []);
      const fields = Object.fromEntries(
        Object.entries(schema.properties).map(([key, value]) => [
          key,
          { shape: shapeOf(value), required: required.has(key) },
        ]),
      );
      return { type: 'object', fields };
    }
    case undefined:
      return { type: 'any' };
    default:
      throw new Error(`unexpected JSON schema type ${schema.type}`);
  }
}

/** Python's repr order, as `describe` sorts a Literal's values (strings and small ints here). */
function sortByRepr(values: unknown[]): unknown[] {
  return [...values].sort((a, b) => (repr(a) < repr(b) ? -1 : repr(a) > repr(b) ? 1 : 0));
}
const repr = (value: unknown): string => (typeof value === 'string' ? `'${value}'` : String(value));

/**
 * Where the daemon's schema (what it may send) and the worker's (what it accepts) disagree: each a path and why.
 * The daemon may be narrower (an integer where the worker takes any number, a set of values where it takes a
 * type, a field it must send where the worker has a default); it may never send what the worker refuses, and every
 * worker field must be one the daemon can set.
 */
function drift(sent: Shape, accepted: Shape, where: string): string[] {
  if (accepted.type === 'any') return [];
  if (sent.nullable && !accepted.nullable) return [`${where}: the daemon may send null, the worker refuses it`];
  if (accepted.enum) {
    if (!sent.enum)
      return [
        `${where}: the worker takes only ${JSON.stringify(accepted.enum)}, the daemon sends any ${sent.type ?? 'value'}`,
      ];
    const extra = sent.enum.filter((value) => !accepted.enum!.includes(value));
    const unreachable = accepted.enum.filter((value) => !sent.enum!.includes(value));
    return [
      ...(extra.length ? [`${where}: the daemon may send ${JSON.stringify(extra)}, which the worker refuses`] : []),
      ...(unreachable.length
        ? [`${where}: the worker takes ${JSON.stringify(unreachable)}, which the daemon never sends`]
        : []),
    ];
  }
  if (sent.enum) {
    const wrong = sent.enum.filter((value) => !fits(value, accepted));
    return wrong.length
      ? [`${where}: the daemon may send ${JSON.stringify(wrong)}, not ${accepted.type ?? 'a union'}`]
      : [];
  }
  if (accepted.union) {
    if (!sent.union) return [`${where}: the worker takes a union by kind, the daemon sends ${sent.type}`];
    return kindsDrift(sent.union, accepted.union, where);
  }
  const numeric = accepted.type === 'number' && sent.type === 'integer';
  if (sent.type !== accepted.type && !numeric)
    return [`${where}: the daemon sends ${sent.type ?? 'a union'}, the worker takes ${accepted.type}`];
  if (accepted.type === 'array') return drift(sent.items!, accepted.items!, `${where}[]`);
  if (accepted.type === 'object' && accepted.fields) {
    if (!sent.fields)
      return [
        `${where}: the daemon sends any object, the worker takes fields ${Object.keys(accepted.fields).join(', ')}`,
      ];
    return fieldsDrift(sent.fields, accepted.fields, where);
  }
  return [];
}

function kindsDrift(sent: Record<string, Shape>, accepted: Record<string, Shape>, where: string): string[] {
  const problems: string[] = [];
  for (const kind of new Set([...Object.keys(sent), ...Object.keys(accepted)])) {
    if (!accepted[kind]) problems.push(`${where}: kind ${kind} is sent but not accepted`);
    else if (!sent[kind]) problems.push(`${where}: kind ${kind} is accepted but never sent`);
    else problems.push(...drift(sent[kind], accepted[kind], `${where}<${kind}>`));
  }
  return problems;
}

function fieldsDrift(
  sent: NonNullable<Shape['fields']>,
  accepted: NonNullable<Shape['fields']>,
  where: string,
): string[] {
  const problems: string[] = [];
  for (const key of new Set([...Object.keys(sent), ...Object.keys(accepted)])) {
    const [ours, theirs] = [sent[key], accepted[key]];
    if (!theirs) problems.push(`${where}.${key}: the daemon sends it, the worker does not know it`);
    else if (!ours) problems.push(`${where}.${key}: the worker takes it, the daemon can never send it`);
    else {
      if (theirs.required && !ours.required)
        problems.push(`${where}.${key}: required by the worker, optional for the daemon`);
      problems.push(...drift(ours.shape, theirs.shape, `${where}.${key}`));
    }
  }
  return problems;
}

function fits(value: unknown, shape: Shape): boolean {
  switch (shape.type) {
    case 'integer':
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'string':
      return typeof value === 'string';
    case 'boolean':
      return typeof value === 'boolean';
    default:
      return false;
  }
}

function workerShapes(): Record<string, Shape> {
  const result = spawnSync('python3', ['-m', 'lightning_trainer.schema'], {
    cwd: path.join(__dirname, '..', '..', 'trainer-daemon', 'python'),
    encoding: 'utf8',
  });
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout) as Record<string, Shape>;
}

describe('the worker contract: the daemon’s zod schemas and the worker’s params dataclasses', () => {
  const worker = workerShapes();

  test('name the same methods', () => {
    assert.deepEqual(Object.keys(worker).sort(), Object.keys(WorkerMethods).sort());
  });

  for (const [method, spec] of Object.entries(WorkerMethods)) {
    test(`${method}: every field the daemon may send is accepted, with its type, values and required-ness`, () => {
      const sent = shapeOf(z.toJSONSchema(spec.params, { io: 'input', unrepresentable: 'any' }) as JsonSchema);
      assert.deepEqual(drift(sent, worker[method]!, `${method}.params`), []);
    });
  }

  test('the comparison fails on drift (a renamed field, a new value, a type, a required field)', () => {
    const accepted: Shape = {
      type: 'object',
      fields: {
        lossType: { shape: { enum: ['dapo', 'grpo'] }, required: false },
        steps: { shape: { type: 'integer' }, required: true },
        lr: { shape: { type: 'number' }, required: false },
      },
    };
    const sent = shapeOf(
      z.toJSONSchema(
        z.object({
          lossType: z.enum(['grpo', 'dapo', 'bnpo']),
          steps: z.number().optional(),
          learningRate: z.number(),
        }),
        { io: 'input' },
      ) as JsonSchema,
    );
    assert.deepEqual(drift(sent, accepted, 'p').sort(), [
      'p.learningRate: the daemon sends it, the worker does not know it',
      'p.lossType: the daemon may send ["bnpo"], which the worker refuses',
      'p.lr: the worker takes it, the daemon can never send it',
      'p.steps: required by the worker, optional for the daemon',
      'p.steps: the daemon sends number, the worker takes integer',
    ]);
  });
});
