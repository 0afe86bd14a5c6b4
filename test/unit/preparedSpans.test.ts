/**
 * The spans of an OTLP export to a rollout's URL are scrubbed where they are decoded (otlp/prepare.ts, in the decode
 * worker or inline) with the secrets the export came with, and the store writes them only if that scrub knew every
 * secret known for the rollout by the write, refusing them (503, retried) otherwise (protocol/preparedSpan.ts): what
 * reaches the file is scrubbed in one pass with at least the secrets the store knows. The shared endpoint's spans are
 * scrubbed by the store.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { SpanKind } from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { Json, SpanInput } from '../../trainer-daemon/protocol';
import type { PreparedSpan } from '../../trainer-daemon/protocol/preparedSpan';
import { RECORD_LIMITS } from '../../trainer-daemon/protocol/recordScrub';
import { OverloadedError } from '../../trainer-daemon/protocol/errors';
import { spanOutcome } from '../../trainer-daemon/protocol/outcome';
import { rememberRolloutSecrets, requestSecretValues, secretsOf } from '../../trainer-daemon/protocol/secrets';
import { OtlpReceiver } from '../../trainer-daemon/otlp/receiver';
import { ExportPreparer, packPart, unpackPart } from '../../trainer-daemon/otlp/prepare';
import { deserialize, serialize } from 'node:v8';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { encode, recordSpans } from '../helpers/otlp';
import { llmSpan } from '../helpers/spans';
import { parsed } from '../helpers/params';
import { silentLogger } from '../../trainer-daemon/log';
import { tempDir } from '../helpers/tmp';

/** An LLM span with these attributes (and fields). */
function span(attributes: Record<string, Json>, extra: Partial<SpanInput> = {}): SpanInput {
  return llmSpan({ attributes, ...extra });
}

function runningRollout(store: Store): string {
  const rollout = store.createRollout(parsed('createRollout', { label: 'prepared' }));
  store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'running' }));
  return rollout.id;
}

/** A store with a running rollout, and an OTLP receiver writing into it (decoding inline, as without the bundle). */
function ingestInto(t: TestContext): { file: string; store: Store; rolloutId: string; receiver: OtlpReceiver } {
  const file = path.join(tempDir(t), 'store.db');
  const store = Store.open(file);
  const rolloutId = runningRollout(store);
  const writes = new WriteQueue(store, silentLogger);
  const receiver = new OtlpReceiver(writes, 64 * 1024 * 1024, silentLogger);
  t.after(async () => {
    await receiver.close();
    writes.shutdown();
    store.close();
  });
  return { file, store, rolloutId, receiver };
}

/** Whether any file of the store (the database, its WAL) holds `text`. */
function storeHolds(file: string, text: string): boolean {
  return fs
    .readdirSync(path.dirname(file))
    .some((name) => fs.readFileSync(path.join(path.dirname(file), name)).includes(text));
}

/** An export's part prepared as a decode worker prepares it, with what the rollout's secrets are now. */
function prepared(rolloutId: string, spans: SpanInput[]): PreparedSpan[] {
  return new ExportPreparer({ rolloutId, secrets: secretsOf(rolloutId) })
    .part(spans.map((span) => ({ rolloutId, span })))
    .spans.map(({ span }) => span as PreparedSpan);
}

test('spans prepared before their rollout learned a secret are refused whole (retry), then stored scrubbed with it', (t) => {
  const file = path.join(tempDir(t), 'store.db');
  const store = Store.open(file);
  t.after(() => store.close());
  const rolloutId = runningRollout(store);
  const known = 'opaque-known-0077';
  rememberRolloutSecrets(rolloutId, [known]);
  // Learned later, and holding the known one: one pass with both redacts it whole, a pass with each would not.
  const secret = `opaque-late-"7\\7"-${known}-tail`;
  const cut = RECORD_LIMITS.maxStringChars - 10;
  const given = [
    span(
      { 'lightning.request': { messages: [{ role: 'user', content: `use ${secret}` }] }, note: secret },
      {
        name: `chat ${secret}`,
        statusCode: 'error',
        statusMessage: `upstream said: ${secret}`,
        events: [{ name: 'exception', timeMs: 1, attributes: { 'exception.message': `bad ${secret}` } }],
      },
    ),
    // The secret across the string limit's cut: redacted whole, never kept in part.
    span({ long: `${'x'.repeat(cut)}${secret}` }, { spanId: 'b7ad6b7169203332' }),
  ];
  const early = prepared(rolloutId, given);
  rememberRolloutSecrets(rolloutId, requestSecretValues({ 'x-api-key': secret }));
  assert.throws(() => store.addSpans({ rolloutId, spans: early }), OverloadedError);
  assert.equal(store.getRolloutDetail(rolloutId).rollout.spanCount, 0, 'nothing of the batch was written');

  store.addSpans({ rolloutId, spans: prepared(rolloutId, given) });
  const [first, second] = store.getRolloutDetail(rolloutId).spans;
  assert.equal(first!.name, 'chat [redacted]');
  assert.equal(first!.statusMessage, 'upstream said: [redacted]');
  assert.deepEqual(first!.attributes['lightning.request'], { messages: [{ role: 'user', content: 'use [redacted]' }] });
  assert.equal(first!.attributes.note, '[redacted]');
  assert.deepEqual(first!.events[0]!.attributes, { 'exception.message': 'bad [redacted]' });
  assert.match(String(second!.attributes.long), /^x+\[redacted\]…\[lightning: truncated/);
  store.close();
  for (const part of ['opaque-late', known, '-tail']) assert.ok(!storeHolds(file, part), part);
});

test('a refused part takes nothing else with it: another export’s part, spans/add’s spans of the same rollout', async (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const rolloutId = runningRollout(store);
  const writes = new WriteQueue(store, silentLogger);
  const stale = prepared(rolloutId, [span({ note: 'stale' })]);
  rememberRolloutSecrets(rolloutId, ['opaque-learned-0202']);
  const fresh = prepared(rolloutId, [span({ note: 'fresh' })]);
  const [refused, ...written] = await Promise.allSettled([
    writes.submitSpans(rolloutId, stale),
    writes.submitSpans(rolloutId, fresh),
    writes.submitSpans(rolloutId, [span({ note: 'spans/add' })]),
  ]);
  assert.ok(refused.status === 'rejected' && refused.reason instanceof OverloadedError, refused.status);
  assert.deepEqual(
    written.map((result) => result.status),
    ['fulfilled', 'fulfilled'],
  );
  assert.deepEqual(
    store
      .getRolloutDetail(rolloutId)
      .spans.map((stored) => stored.attributes.note)
      .sort(),
    ['fresh', 'spans/add'],
  );
  writes.shutdown();
});

test('a late call whose record a scrub cut is truncated by its rollout’s end; a truncation of the proxy’s stays', (t) => {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const rolloutId = runningRollout(store);
  const stream = { 'lightning.outcome': 'truncated', 'lightning.truncated_by': 'stream_content' };
  const long = 'x'.repeat(RECORD_LIMITS.maxStringChars + 1);
  const spans = [...prepared(rolloutId, [span({ long })]), span(stream)];
  store.transitionRollout(parsed('transitionRollout', { id: rolloutId, to: 'succeeded' }));
  store.addSpans({ rolloutId, spans, attempt: 1 });
  const outcomes = store.getRolloutDetail(rolloutId).spans.map((stored) => spanOutcome(stored));
  assert.deepEqual(outcomes, [
    { kind: 'truncated', limit: 'rollout_ended' },
    { kind: 'truncated', limit: 'stream_content' },
  ]);
});

test('a span’s own header secret found where it was decoded is remembered for its rollout and redacted in later exports', async (t) => {
  const { file, store, rolloutId, receiver } = ingestInto(t);
  const key = 'opaque-header-key-4242';
  const exportOf = (attributes: Record<string, string>): Buffer =>
    encode(
      recordSpans((tracer) => tracer.startSpan('chat m', { kind: SpanKind.CLIENT, attributes }).end()),
      'protobuf',
    );
  const first = await receiver.ingest(
    rolloutId,
    exportOf({ 'http.request.header.x-api-key': key, 'gen_ai.operation.name': 'chat' }),
    'application/x-protobuf',
    undefined,
  );
  assert.equal(first.stored, 1);
  assert.ok(secretsOf(rolloutId).includes(key), 'remembered for the rollout on the main thread');
  await receiver.ingest(
    rolloutId,
    exportOf({ 'gen_ai.prompt': `my key is ${key}`, 'gen_ai.operation.name': 'chat' }),
    'application/x-protobuf',
    undefined,
  );
  const spans = store.getRolloutDetail(rolloutId).spans;
  assert.equal(spans[0]!.attributes['http.request.header.x-api-key'], '[redacted]');
  assert.equal(spans[1]!.attributes['gen_ai.prompt'], 'my key is [redacted]');
  assert.ok(!storeHolds(file, key));
});

test('a credential header in a later span of an export’s part: it is refused once (503), and the retry redacts the earlier span too', async (t) => {
  const { file, store, rolloutId, receiver } = ingestInto(t);
  const key = 'opaque-header-key-5353';
  const body = encode(
    recordSpans((tracer) => {
      tracer.startSpan('chat m', { kind: SpanKind.CLIENT, attributes: { 'gen_ai.prompt': `key ${key}` } }).end();
      tracer.startSpan('GET', { kind: SpanKind.CLIENT, attributes: { 'http.request.header.x-api-key': key } }).end();
    }),
    'protobuf',
  );
  await assert.rejects(receiver.ingest(rolloutId, body, 'application/x-protobuf', undefined), OverloadedError);
  assert.equal(store.getRolloutDetail(rolloutId).rollout.spanCount, 0);
  const retried = await receiver.ingest(rolloutId, body, 'application/x-protobuf', undefined);
  assert.equal(retried.stored, 2);
  const spans = store.getRolloutDetail(rolloutId).spans;
  assert.deepEqual(
    spans.map((stored) => stored.attributes['gen_ai.prompt'] ?? stored.attributes['http.request.header.x-api-key']),
    ['key [redacted]', '[redacted]'],
  );
  assert.ok(!storeHolds(file, key));
});

test('spans to the shared endpoint, naming their rollout, are scrubbed by the store with that rollout’s secrets', async (t) => {
  const { file, store, rolloutId, receiver } = ingestInto(t);
  const secret = 'opaque-shared-credential-6464';
  rememberRolloutSecrets(rolloutId, [secret]);
  const body = encode(
    recordSpans(
      (tracer) => tracer.startSpan('chat m', { kind: SpanKind.CLIENT, attributes: { note: `got ${secret}` } }).end(),
      resourceFromAttributes({ 'lightning.rollout_id': rolloutId }),
    ),
    'protobuf',
  );
  const answer = await receiver.ingest(null, body, 'application/x-protobuf', undefined);
  assert.equal(answer.stored, 1);
  assert.equal(store.getRolloutDetail(rolloutId).spans[0]!.attributes.note, 'got [redacted]');
  assert.ok(!storeHolds(file, secret));
});

test('a part crosses from its decode worker packed, and arrives as it was prepared: every field, each span its list', () => {
  const agent = span(
    { 'gen_ai.operation.name': 'chat', 'gen_ai.response.id': 'resp-1', note: 'uses sk-known-0123456789abcdef' },
    { parentSpanId: 'b7ad6b7169203331', statusCode: 'error', statusMessage: 'upstream 503', promptTokens: 5 },
  );
  const proxied = span({ 'lightning.api': 'openai.chat', 'gen_ai.response.id': 'resp-2' }, { endMs: null });
  // The third span carries a credential header: it and the spans after it are scrubbed with a longer list.
  const header = span({ 'http.request.header.x-api-key': 'sk-header-abcdef0123456789' });
  const preparer = new ExportPreparer({ rolloutId: 'r1', secrets: ['sk-known-0123456789abcdef'] });
  const part = preparer.part([
    { rolloutId: 'r1', span: agent },
    { rolloutId: null, span: proxied },
    { rolloutId: 'r1', span: header },
    { rolloutId: 'r1', span: agent },
  ]);
  // As postMessage carries it: a structured clone.
  const crossed = unpackPart(deserialize(serialize(packPart(part))) as ReturnType<typeof packPart>);
  assert.deepEqual(crossed, part);
  const lists = crossed.spans.map(({ span }) => (span as PreparedSpan).scrubbedWith);
  assert.equal(
    lists[0],
    lists[1],
    'spans scrubbed with one list share one array (lackingSecrets works out each list once)',
  );
  assert.notEqual(lists[1], lists[2]);
  assert.equal(lists[2], lists[3]);
  assert.deepEqual(crossed.found, ['sk-header-abcdef0123456789']);
  // The shared endpoint's spans, with their attributes for the store to scrub, cross as they are.
  const raw = new ExportPreparer({ rolloutId: null, secrets: [] }).part([{ rolloutId: 'r2', span: agent }]);
  assert.deepEqual(unpackPart(deserialize(serialize(packPart(raw))) as ReturnType<typeof packPart>), raw);
});
