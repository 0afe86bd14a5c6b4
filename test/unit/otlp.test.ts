// Literals with more digits than a double holds say the exact decimal meant; the closest double is compared.
/* eslint-disable no-loss-of-precision */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import zlib from 'node:zlib';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import Long from 'long';
import { InvalidInputError, PayloadTooLargeError } from '../../trainer-daemon/protocol/errors';
import { UnsupportedMediaTypeError, decodeTraceRequest } from '../../trainer-daemon/otlp/decode';
import { PART_MAX_CHARS, PART_MAX_SPANS, splitIntoParts } from '../../trainer-daemon/otlp/parts';
import { nanosToMs, normalizeTraceRequest } from '../../trainer-daemon/otlp/normalize';
import { silentLogger } from '../../trainer-daemon/log';
import { OtlpReceiver } from '../../trainer-daemon/otlp/receiver';
import { Store } from '../../trainer-daemon/store/store';
import { WriteQueue } from '../../trainer-daemon/store/writeQueue';
import { encode, oneSpan, recordSpans } from '../helpers/otlp';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';
import { editedBodies, ingest, JSON_TYPE, MAX, PROTOBUF } from '../helpers/otlpIngest';

const T0: [number, number] = [1_700_000_000, 123_456_789];

describe('OTLP traces: decode and normalize', () => {
  const tree = recordSpans((tracer) => {
    const parent = tracer.startSpan('agent run', { kind: SpanKind.SERVER, startTime: T0 });
    const child = tracer.startSpan(
      'chat gpt-4o-mini',
      {
        kind: SpanKind.CLIENT,
        startTime: [1_700_000_000, 200_250_000],
        attributes: { text: 'hi', count: 3, ratio: 0.25, flag: false, words: ['a', 'b'], scores: [1.5, 2] },
      },
      trace.setSpan(ROOT_CONTEXT, parent),
    );
    child.addEvent('first token', { index: 0 }, [1_700_000_000, 300_000_000]);
    child.setStatus({ code: SpanStatusCode.ERROR, message: 'upstream 503' });
    child.end([1_700_000_001, 750_500]);
    parent.setStatus({ code: SpanStatusCode.OK });
    parent.end([1_700_000_002, 0]);
  });
  const [child, parent] = tree;

  for (const encoding of ['protobuf', 'json'] as const) {
    test(`${encoding}: ids, sub-millisecond times, attributes, events, status and kind survive the round trip`, () => {
      const { spans, rejected } = ingest(encode(tree, encoding), encoding);
      assert.deepEqual(rejected, []);
      assert.deepEqual(
        spans.map((s) => s.rolloutId),
        [null, null],
      );
      assert.deepEqual(spans[0]!.span, {
        traceId: child!.spanContext().traceId,
        spanId: child!.spanContext().spanId,
        parentSpanId: parent!.spanContext().spanId,
        name: 'chat gpt-4o-mini',
        kind: 'client',
        category: 'other',
        startMs: 1_700_000_000_200.25,
        endMs: 1_700_000_001_000.7505,
        statusCode: 'error',
        statusMessage: 'upstream 503',
        attributes: { text: 'hi', count: 3, ratio: 0.25, flag: false, words: ['a', 'b'], scores: [1.5, 2] },
        events: [{ name: 'first token', timeMs: 1_700_000_000_300, attributes: { index: 0 } }],
        promptTokens: null,
        completionTokens: null,
      });
      const root = spans[1]!.span;
      assert.deepEqual(
        [root.name, root.kind, root.parentSpanId, root.statusCode, root.statusMessage],
        ['agent run', 'server', null, 'ok', null],
      );
      assert.equal(root.startMs, 1_700_000_000_123.456789);
      assert.equal(root.endMs, 1_700_000_002_000);
    });

    test(`${encoding}: gzip bodies decode to the same spans`, () => {
      assert.deepEqual(
        ingest(zlib.gzipSync(encode(tree, encoding)), encoding, 'gzip'),
        ingest(encode(tree, encoding), encoding),
      );
    });
  }

  test('every AnyValue type: kvlist, bytes, 64-bit ints, empty values, non-finite doubles, nested arrays', () => {
    const bodies = editedBodies(oneSpan('values', {}), (request, encoding) => {
      const proto = encoding === 'protobuf';
      request.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes.push(
        {
          key: 'settings',
          value: {
            kvlistValue: {
              values: [
                { key: 'model', value: { stringValue: 'gpt' } },
                {
                  key: 'headers',
                  value: {
                    kvlistValue: {
                      values: [{ key: 'Authorization', value: { stringValue: 'Bearer sk-nested-0123456789abcdef' } }],
                    },
                  },
                },
              ],
            },
          },
        },
        { key: 'blob', value: { bytesValue: proto ? Uint8Array.from([0xde, 0xad, 0xbe, 0xef]) : '3q2+7w==' } },
        { key: 'big', value: { intValue: proto ? Long.fromString('9007199254740993') : '9007199254740993' } },
        { key: 'negative', value: { intValue: proto ? Long.fromNumber(-5) : -5 } },
        { key: 'nothing', value: {} },
        { key: 'nan', value: { doubleValue: proto ? Number.NaN : 'NaN' } },
        {
          key: 'mixed',
          value: {
            arrayValue: {
              values: [{ stringValue: 'x' }, { boolValue: true }, { arrayValue: { values: [{ doubleValue: 0.5 }] } }],
            },
          },
        },
        { key: 'empty', value: { stringValue: '' } },
      );
    });
    const expected = {
      settings: { model: 'gpt', headers: { Authorization: '[redacted]' } },
      blob: '3q2+7w==',
      big: '9007199254740993',
      negative: -5,
      nothing: null,
      nan: 'NaN',
      mixed: ['x', true, [0.5]],
      empty: '',
    };
    assert.deepEqual(ingest(bodies.protobuf, 'protobuf').spans[0]!.span.attributes, expected);
    assert.deepEqual(ingest(bodies.json, 'json').spans[0]!.span.attributes, expected);
  });

  test('JSON may carry 64-bit integers as numbers, even past 2^53', () => {
    const body = encode(oneSpan('s', { big: 1 }), 'json')
      .toString('utf8')
      .replace(/"startTimeUnixNano":"\d+"/, '"startTimeUnixNano":1700000000123456789')
      .replace('{"intValue":1}', '{"intValue":9007199254740993}');
    assert.match(body, /"startTimeUnixNano":1700000000123456789,/);
    const { span } = ingest(Buffer.from(body), 'json').spans[0]!;
    assert.equal(span.startMs, 1_700_000_000_123.456789);
    assert.deepEqual(span.attributes, { big: '9007199254740992' });
  });

  test('nanoseconds become milliseconds without rounding the full count through a double', () => {
    // Number(ns) / 1e6 gives 1700160584624.6125 here: the nanosecond count is rounded before dividing.
    assert.notEqual(Number(1_700_160_584_624_612_684n) / 1e6, 1_700_160_584_624.612684);
    assert.equal(nanosToMs('1700160584624612684'), 1_700_160_584_624.612684);
    assert.equal(nanosToMs('1000001'), 1.000001);
    assert.equal(nanosToMs('0'), 0);
  });

  test('an export with exactly the span limit is decoded', () => {
    assert.equal(
      decodeTraceRequest(encode(tree, 'protobuf'), PROTOBUF, undefined, MAX, 2).resourceSpans[0]!.scopeSpans[0]!.spans
        .length,
      2,
    );
  });

  test('content types with parameters are accepted', () => {
    const request = decodeTraceRequest(encode(tree, 'json'), 'Application/JSON; charset=utf-8', undefined, MAX);
    assert.equal(request.resourceSpans[0]!.scopeSpans[0]!.spans.length, 2);
    assert.deepEqual(request.resourceSpans[0]!.scopeSpans[0]!.scope, { name: 'test-agent', version: '1.2.3' });
  });

  const failures: Array<[what: string, call: () => unknown, kind: typeof InvalidInputError, message: RegExp]> = [
    [
      'garbage protobuf',
      () => decodeTraceRequest(Buffer.from('definitely not protobuf'), PROTOBUF, undefined, MAX),
      InvalidInputError,
      /^OTLP protobuf body is not a valid ExportTraceServiceRequest \(invalid wire type 4 at offset 1\)$/,
    ],
    [
      'truncated protobuf',
      () => decodeTraceRequest(encode(tree, 'protobuf').subarray(0, 40), PROTOBUF, undefined, MAX),
      InvalidInputError,
      /protobuf body is not a valid ExportTraceServiceRequest \(index out of range/,
    ],
    [
      'invalid JSON (the body is not echoed)',
      () => decodeTraceRequest(Buffer.from('{"resourceSpans": sk-secret'), JSON_TYPE, undefined, MAX),
      InvalidInputError,
      /^OTLP JSON body is not valid JSON$/,
    ],
    [
      'JSON of the wrong shape',
      () => decodeTraceRequest(Buffer.from('{"resourceSpans": "x"}'), JSON_TYPE, undefined, MAX),
      InvalidInputError,
      /^OTLP JSON body is not an ExportTraceServiceRequest: request\.resourceSpans: /,
    ],
    [
      'wrong content type',
      () => decodeTraceRequest(encode(tree, 'json'), 'text/plain', undefined, MAX),
      UnsupportedMediaTypeError,
      /^Content-Type "text\/plain" is not supported; send OTLP traces as application\/x-protobuf or application\/json$/,
    ],
    [
      'missing content type',
      () => decodeTraceRequest(encode(tree, 'json'), undefined, undefined, MAX),
      UnsupportedMediaTypeError,
      /^Content-Type is missing/,
    ],
    [
      'unsupported content encoding',
      () => decodeTraceRequest(encode(tree, 'json'), JSON_TYPE, 'br', MAX),
      UnsupportedMediaTypeError,
      /^Content-Encoding "br" is not supported/,
    ],
    [
      'bad gzip',
      () => decodeTraceRequest(encode(tree, 'protobuf'), PROTOBUF, 'gzip', MAX),
      InvalidInputError,
      /^OTLP body is not valid gzip \(incorrect header check\)$/,
    ],
    [
      'oversized after gunzip',
      () => decodeTraceRequest(zlib.gzipSync(Buffer.alloc(1024 * 1024, 0x20)), JSON_TYPE, 'gzip', 65_536),
      PayloadTooLargeError,
      /^OTLP body is over the 65536-byte limit once decompressed/,
    ],
    [
      'oversized without compression',
      () => decodeTraceRequest(Buffer.alloc(100, 0x20), JSON_TYPE, undefined, 99),
      PayloadTooLargeError,
      /^OTLP body is 100 bytes, over the 99-byte limit/,
    ],
    [
      'more protobuf spans than the limit',
      () => decodeTraceRequest(encode(tree, 'protobuf'), PROTOBUF, undefined, MAX, 1),
      PayloadTooLargeError,
      /^2 spans in one OTLP export is over the 1-span limit; export smaller batches/,
    ],
    [
      'more JSON spans than the limit',
      () => decodeTraceRequest(encode(tree, 'json'), JSON_TYPE, undefined, MAX, 1),
      PayloadTooLargeError,
      /^2 spans in one OTLP export is over the 1-span limit; export smaller batches/,
    ],
  ];
  for (const [what, call, kind, message] of failures) {
    test(`rejects ${what} with ${kind.name}`, () => {
      assert.throws(call, (error: unknown) => {
        assert.ok(error instanceof kind, `expected ${kind.name}, got ${String(error)}`);
        assert.equal(error instanceof UnsupportedMediaTypeError, kind === UnsupportedMediaTypeError);
        assert.match(error.message, message);
        assert.doesNotMatch(error.message, /sk-secret/);
        return true;
      });
    });
  }
});

describe('an export is cut into parts of bounded size (committed one at a time)', () => {
  const spansOf = (count: number, chars: number) =>
    normalizeTraceRequest(
      decodeTraceRequest(
        encode(
          recordSpans((tracer) => {
            for (let i = 0; i < count; i += 1)
              tracer.startSpan(`s${i}`, { attributes: { 'gen_ai.prompt': 'x'.repeat(chars) } }).end();
          }),
          'protobuf',
        ),
        PROTOBUF,
        undefined,
        1024 * 1024 * 1024,
      ),
    ).spans;

  test('many small spans: as few parts as PART_MAX_SPANS allows, of equal size, every span once, in order', () => {
    const spans = spansOf(PART_MAX_SPANS * 2 + 3, 10);
    const parts = splitIntoParts(spans);
    // Not PART_MAX_SPANS, PART_MAX_SPANS, 3: each part is a commit, and a 3-span one costs nearly as much.
    const third = Math.ceil(spans.length / 3);
    assert.deepEqual(
      parts.map((part) => part.length),
      [third, third, spans.length - 2 * third],
    );
    assert.deepEqual(parts.flat(), spans);
    assert.deepEqual(
      splitIntoParts(spansOf(PART_MAX_SPANS, 10)).map((part) => part.length),
      [PART_MAX_SPANS],
    );
  });

  // The deadline is the test's failure: without the fix the last part waited out a 10-minute window.
  test(
    'a later part is committed at once, not held in the span window where small writes wait for company',
    { timeout: 30_000 },
    async (t) => {
      const store = Store.open(path.join(tempDir(t), 'store.db'));
      const writes = new WriteQueue(store, silentLogger, { spanDelayMs: 10 * 60_000 });
      const receiver = new OtlpReceiver(writes, 64 * 1024 * 1024, silentLogger);
      t.after(async () => {
        writes.shutdown();
        await receiver.close();
        store.close();
      });
      const { id } = store.createRollout(parsed('createRollout', { label: 'parts' }));
      store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
      // 400 spans of 3,000 characters then 7 small ones: a first part cut at PART_MAX_CHARS (~350 spans), which
      // the queue commits at once (it is large), then a short one.
      const big = 'b'.repeat(3_000);
      const count = 400 + 7;
      const body = encode(
        recordSpans((tracer) => {
          for (let i = 0; i < count; i += 1)
            tracer.startSpan(`s${i}`, { attributes: i < 400 ? { 'gen_ai.prompt': big } : {} }).end();
        }),
        'protobuf',
      );
      const answer = await receiver.ingest(id, body, PROTOBUF, undefined);
      assert.deepEqual([answer.stored, answer.rejected], [count, 0]);
      assert.equal(store.getRollout(id).spanCount, count);
    },
  );

  test('large spans: a part holds about PART_MAX_CHARS; a span larger than that is a part alone', () => {
    const spans = spansOf(10, PART_MAX_CHARS / 4);
    const parts = splitIntoParts(spans);
    assert.ok(
      parts.every((part) => part.length <= 4),
      String(parts.map((part) => part.length)),
    );
    assert.deepEqual(parts.flat(), spans);
    const huge = spansOf(2, PART_MAX_CHARS * 2);
    assert.deepEqual(
      splitIntoParts(huge).map((part) => part.length),
      [1, 1],
    );
    assert.deepEqual(splitIntoParts([]), []);
  });
});

test('OTLP/JSON times and ints as {low, high}, as @opentelemetry/exporter-trace-otlp-http 0.44.0 sent them, are read', () => {
  // open-telemetry/opentelemetry-js#4216: the exporter's own example.
  const body = JSON.stringify({
    resourceSpans: [
      {
        scopeSpans: [
          {
            spans: [
              {
                traceId: '6530d7d67a99987d946f0be78b547acb',
                spanId: '5917146c1d45991b',
                name: 'main-operation',
                kind: 1,
                startTimeUnixNano: { low: -1013133952, high: 395276536 },
                endTimeUnixNano: { low: -1011286551, high: 395276536 },
                attributes: [{ key: 'n', value: { intValue: { low: -1, high: -1 } } }],
              },
            ],
          },
        ],
      },
    ],
  });
  const [span] = decodeTraceRequest(Buffer.from(body), JSON_TYPE, undefined, MAX).resourceSpans[0]!.scopeSpans[0]!
    .spans;
  assert.equal(span!.startTimeUnixNano, '1697699798278000000');
  assert.equal(span!.endTimeUnixNano, '1697699798279847401');
  assert.deepEqual(span!.attributes, { n: -1 });
});
