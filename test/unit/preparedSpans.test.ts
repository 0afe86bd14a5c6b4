/**
 * OTLP spans are scrubbed where they are decoded (otlp/prepare.ts, in the decode worker or inline) with the secrets
 * the export came with, and the store scrubs them again for any secret it knows by the write and that scrub did not
 * (protocol/preparedSpan.ts): what reaches the file is scrubbed with every secret known at the write.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { SpanKind } from '@opentelemetry/api';
import type { Json, SpanInput } from '../../trainer-daemon/protocol';
import { prepareSpan, rescrubbed } from '../../trainer-daemon/protocol/preparedSpan';
import { rememberRolloutSecrets, requestSecretValues, secretsOf } from '../../trainer-daemon/protocol/secrets';
import { OtlpReceiver } from '../../trainer-daemon/otlp/receiver';
import { ExportPreparer } from '../../trainer-daemon/otlp/prepare';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { encode, recordSpans } from '../helpers/otlp';
import { parsed } from '../helpers/params';
import { silentLogger } from '../../trainer-daemon/log';
import { tempDir } from '../helpers/tmp';

function span(attributes: Record<string, Json>, extra: Partial<SpanInput> = {}): SpanInput {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    parentSpanId: null,
    name: 'chat m',
    kind: 'client',
    category: 'llm',
    startMs: 1,
    endMs: 2,
    statusCode: 'ok',
    statusMessage: null,
    attributes,
    events: [],
    promptTokens: null,
    completionTokens: null,
    ...extra,
  };
}

function runningRollout(store: Store): string {
  const rollout = store.createRollout(parsed('createRollout', { label: 'prepared' }));
  store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'running' }));
  return rollout.id;
}

test('a secret the rollout learned after its export was prepared is redacted where the store writes the span', (t) => {
  const file = path.join(tempDir(t), 'store.db');
  const store = Store.open(file);
  t.after(() => store.close());
  const rolloutId = runningRollout(store);
  // Quotes and backslashes: JSON text holds them escaped, and they are still found.
  const secret = 'opaque-late-credential-"7\\7"';
  const given = span(
    { 'lightning.request': { messages: [{ role: 'user', content: `use ${secret}` }] }, note: secret },
    {
      name: `chat ${secret}`,
      statusCode: 'error',
      statusMessage: `upstream said: ${secret}`,
      events: [{ name: 'exception', timeMs: 1, attributes: { 'exception.message': `bad ${secret}` } }],
    },
  );
  // Prepared (as a decode worker does) before the rollout knew the secret: it is still in the prepared text.
  const prepared = new ExportPreparer({ rolloutId, secrets: secretsOf(rolloutId) }).part([{ rolloutId, span: given }])
    .spans[0]!.span;
  assert.ok(prepared.attributes.includes(JSON.stringify(secret).slice(1, -1)));
  rememberRolloutSecrets(rolloutId, requestSecretValues({ 'x-api-key': secret }));
  store.addSpans({ rolloutId, spans: [prepared] });

  const [stored] = store.getRolloutDetail(rolloutId).spans;
  assert.equal(stored!.name, 'chat [redacted]');
  assert.equal(stored!.statusMessage, 'upstream said: [redacted]');
  assert.deepEqual(stored!.attributes['lightning.request'], {
    messages: [{ role: 'user', content: 'use [redacted]' }],
  });
  assert.equal(stored!.attributes.note, '[redacted]');
  assert.deepEqual(stored!.events[0]!.attributes, { 'exception.message': 'bad [redacted]' });
  store.close();
  for (const name of fs.readdirSync(path.dirname(file)))
    assert.ok(!fs.readFileSync(path.join(path.dirname(file), name)).includes('opaque-late-credential'), name);
});

test('a prepared span is scrubbed again only where a secret it lacked occurs in it', () => {
  const secret = 'nopaque-secret-0101';
  const plain = prepareSpan(span({ note: 'nothing to see' }), []);
  assert.equal(rescrubbed(plain, [secret]), plain, 'nothing to redact: the same span, not read back');
  // The JSON text of "a<newline>opaque-secret-0101" holds the secret's characters across the escape `\n`: read back,
  // the string does not hold the secret, and the span is stored as it was.
  const across = prepareSpan(span({ note: `a\n${secret.slice(1)}` }), []);
  assert.ok(across.attributes.includes(secret));
  const again = rescrubbed(across, [secret]);
  assert.deepEqual(JSON.parse(again.attributes), { note: `a\n${secret.slice(1)}` });
});

test('a span’s own header secret found where it was decoded is remembered for its rollout and redacted in later exports', async (t) => {
  const file = path.join(tempDir(t), 'store.db');
  const store = Store.open(file);
  t.after(() => store.close());
  const rolloutId = runningRollout(store);
  const writes = new WriteQueue(store, silentLogger);
  const receiver = new OtlpReceiver(writes, 64 * 1024 * 1024, silentLogger);
  t.after(() => receiver.close());
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
  writes.shutdown();
  store.close();
  for (const name of fs.readdirSync(path.dirname(file)))
    assert.ok(!fs.readFileSync(path.join(path.dirname(file), name)).includes(key), name);
});
