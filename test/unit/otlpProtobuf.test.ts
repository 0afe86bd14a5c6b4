// The OTLP/protobuf reader (trainer-daemon/otlp/protobuf.ts) against the OpenTelemetry project's own encoders: the
// SDK's exporters' serializer, and the collector messages' generated protobufjs code for what an SDK cannot produce.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import Long from 'long';
import { InvalidInputError, PayloadTooLargeError } from '../../trainer-daemon/protocol/errors';
import { decodeTraceRequest } from '../../trainer-daemon/otlp/decode';
import {
  countTraceSpans,
  MAX_PROTOBUF_DEPTH,
  readTraceRequest,
  writeExportResponse,
} from '../../trainer-daemon/otlp/protobuf';
import { encode, ExportTraceServiceRequest, ExportTraceServiceResponse, recordSpans } from '../helpers/otlp';
import { JSON_TYPE, MAX, PROTOBUF } from '../helpers/otlpIngest';

/** The generated encoder over a plain message (the collector's field names). */
function wire(message: unknown): Buffer {
  return Buffer.from(ExportTraceServiceRequest.encode(message as never).finish());
}

const TRACE = Uint8Array.from({ length: 16 }, (_, i) => i + 1);
const SPAN = Uint8Array.from({ length: 8 }, (_, i) => 0xa0 + i);

/** One span whose attributes are `attributes` (KeyValue messages), in one resource and scope. */
function oneSpanWire(attributes: unknown[], extra: Record<string, unknown> = {}): Buffer {
  return wire({
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'agent' } }] },
        scopeSpans: [
          {
            scope: { name: 'scope', version: '1' },
            spans: [
              {
                traceId: TRACE,
                spanId: SPAN,
                name: 'chat',
                kind: 3,
                startTimeUnixNano: Long.fromString('1700000000123456789', true),
                endTimeUnixNano: Long.fromString('1700000001000000001', true),
                attributes,
                ...extra,
              },
            ],
          },
        ],
      },
    ],
  });
}

function attributesOf(body: Buffer): Record<string, unknown> {
  return readTraceRequest(body).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
}

/** A tiny protobuf writer for bytes no encoder would write. */
const bytes = {
  varint(value: number | bigint): number[] {
    let v = BigInt.asUintN(64, BigInt(value));
    const out: number[] = [];
    while (v >= 0x80n) {
      out.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    out.push(Number(v));
    return out;
  },
  tag(field: number, wireType: number): number[] {
    return bytes.varint((field << 3) | wireType);
  },
  len(field: number, content: number[]): number[] {
    return [...bytes.tag(field, 2), ...bytes.varint(content.length), ...content];
  },
  text(value: string): number[] {
    return [...Buffer.from(value)];
  },
};

function invalidWith(pattern: RegExp): (error: unknown) => boolean {
  return (error) => error instanceof InvalidInputError && pattern.test(error.message);
}

describe('OTLP/protobuf reader', () => {
  test('reads what the SDK exports exactly as the OTLP/JSON of the same spans is parsed', () => {
    const resource = resourceFromAttributes({ 'service.name': 'agent', 'lightning.rollout_id': 'ro-1', n: 7 });
    const spans = recordSpans((tracer) => {
      const root = tracer.startSpan('invoke_agent', { kind: SpanKind.SERVER, startTime: [1_700_000_000, 5] });
      const child = tracer.startSpan(
        'chat gpt',
        {
          kind: SpanKind.CLIENT,
          attributes: {
            text: 'héllo – ✓ 🙂',
            empty: '',
            count: 3,
            negative: -42,
            big: 2 ** 52,
            ratio: 0.25,
            flag: true,
            off: false,
            words: ['a', '', 'ü'],
            numbers: [1, 2.5, -3],
            flags: [true, false],
          },
          links: [{ context: root.spanContext(), attributes: { why: 'link' } }],
        },
        trace.setSpan(ROOT_CONTEXT, root),
      );
      child.addEvent('token', { index: 0, text: 'x' }, [1_700_000_000, 999_999_999]);
      child.addEvent('bare');
      child.setStatus({ code: SpanStatusCode.ERROR, message: 'upstream 503 ✗' });
      child.end();
      root.setStatus({ code: SpanStatusCode.OK });
      root.end();
      tracer.startSpan('tool', { kind: SpanKind.INTERNAL }).end();
    }, resource);
    const fromProtobuf = decodeTraceRequest(encode(spans, 'protobuf'), PROTOBUF, undefined, MAX);
    const fromJson = decodeTraceRequest(encode(spans, 'json'), JSON_TYPE, undefined, MAX);
    assert.deepEqual(fromProtobuf, fromJson);
    assert.equal(fromProtobuf.resourceSpans[0]!.scopeSpans[0]!.spans.length, 3);
    assert.equal(countTraceSpans(encode(spans, 'protobuf')), 3);
  });

  test('int64, fixed64 and double values at their edges', () => {
    const int = (value: string) => ({ intValue: Long.fromString(value) });
    const body = oneSpanWire([
      { key: 'zero', value: int('0') },
      { key: 'minus one', value: int('-1') },
      { key: 'int32 min', value: int('-2147483648') },
      { key: 'uint32 max', value: int('4294967295') },
      { key: 'safe max', value: int('9007199254740991') },
      { key: 'safe min', value: int('-9007199254740991') },
      { key: 'past safe', value: int('9007199254740992') },
      { key: 'minus 2^53', value: int('-9007199254740992') },
      { key: 'int64 max', value: int('9223372036854775807') },
      { key: 'int64 min', value: int('-9223372036854775808') },
      { key: 'nan', value: { doubleValue: Number.NaN } },
      { key: 'inf', value: { doubleValue: Number.POSITIVE_INFINITY } },
      { key: '-inf', value: { doubleValue: Number.NEGATIVE_INFINITY } },
      { key: 'tiny', value: { doubleValue: 5e-324 } },
      { key: 'bytes', value: { bytesValue: Uint8Array.from([0, 255, 16]) } },
      { key: 'no bytes', value: { bytesValue: new Uint8Array() } },
    ]);
    assert.deepEqual(attributesOf(body), {
      zero: 0,
      'minus one': -1,
      'int32 min': -2147483648,
      'uint32 max': 4294967295,
      'safe max': 9007199254740991,
      'safe min': -9007199254740991,
      'past safe': '9007199254740992',
      'minus 2^53': '-9007199254740992',
      'int64 max': '9223372036854775807',
      'int64 min': '-9223372036854775808',
      nan: 'NaN',
      inf: 'Infinity',
      '-inf': '-Infinity',
      tiny: 5e-324,
      bytes: 'AP8Q',
      'no bytes': '',
    });
    const span = readTraceRequest(body).resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
    assert.equal(span.startTimeUnixNano, '1700000000123456789');
    assert.equal(span.endTimeUnixNano, '1700000001000000001');
    // A time under 2^53 ns takes the number path; the largest fixed64 the BigInt one.
    const times = (start: string, end: string) =>
      readTraceRequest(
        oneSpanWire([], {
          startTimeUnixNano: Long.fromString(start, true),
          endTimeUnixNano: Long.fromString(end, true),
        }),
      ).resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
    assert.deepEqual(
      [times('9007199254740991', '18446744073709551615').startTimeUnixNano, times('1', '0').startTimeUnixNano],
      ['9007199254740991', '1'],
    );
    assert.equal(times('1', '18446744073709551615').endTimeUnixNano, '18446744073709551615');
  });

  test('keys: `__proto__` an own property, a later duplicate wins, an empty key and a value-less pair as OTLP/JSON', () => {
    const attributes = attributesOf(
      oneSpanWire([
        { key: '__proto__', value: { stringValue: 'polluted?' } },
        { key: 'k', value: { stringValue: 'first' } },
        { key: '', value: { stringValue: 'no key' } },
        { key: 'k', value: { stringValue: 'second' } },
        { key: 'unset' },
        { key: 'empty value', value: {} },
        { key: 'nested', value: { kvlistValue: { values: [{ key: 'a', value: { arrayValue: { values: [{}] } } }] } } },
        { key: 'empty list', value: { arrayValue: {} } },
      ]),
    );
    assert.equal(Object.getPrototypeOf(attributes), Object.prototype);
    assert.deepEqual(Object.keys(attributes), ['__proto__', 'k', 'unset', 'empty value', 'nested', 'empty list']);
    assert.equal(Object.getOwnPropertyDescriptor(attributes, '__proto__')?.value, 'polluted?');
    assert.equal(attributes.k, 'second');
    assert.deepEqual([attributes.unset, attributes['empty value']], [null, null]);
    assert.deepEqual(attributes.nested, { a: [null] });
    assert.deepEqual(attributes['empty list'], []);
  });

  test('many distinct keys, and keys that share a prefix or a length, each decode as themselves', () => {
    // More keys than the key cache has slots, twice over: a slot's other key must never be returned.
    const keys = Array.from({ length: 2_500 }, (_, i) => (i % 3 === 0 ? `k${i}` : i % 3 === 1 ? `k${i}x` : `ü${i}`));
    for (let round = 0; round < 2; round += 1) {
      const attributes = attributesOf(oneSpanWire(keys.map((key, i) => ({ key, value: { intValue: i } }))));
      assert.deepEqual(Object.keys(attributes), keys);
      assert.ok(keys.every((key, i) => attributes[key] === i));
    }
    assert.deepEqual(attributesOf(oneSpanWire([{ key: 'x'.repeat(65), value: { stringValue: 'long key' } }])), {
      ['x'.repeat(65)]: 'long key',
    });
  });

  test('unknown fields of every wire type, groups and fields in pieces are read as protobuf allows', () => {
    const spanBody = [
      ...bytes.len(1, [...TRACE]),
      ...bytes.len(2, [...SPAN]),
      ...bytes.tag(99, 0),
      ...bytes.varint(-5),
      ...bytes.tag(98, 1),
      ...[1, 2, 3, 4, 5, 6, 7, 8],
      ...bytes.tag(97, 5),
      ...[1, 2, 3, 4],
      // A group holding a nested group and a field.
      ...bytes.tag(96, 3),
      ...bytes.tag(95, 3),
      ...bytes.tag(1, 0),
      1,
      ...bytes.tag(95, 4),
      ...bytes.tag(96, 4),
      ...bytes.len(5, bytes.text('a first name, replaced')),
      ...bytes.len(5, bytes.text('chat')),
      ...bytes.tag(7, 1),
      ...[0x15, 0xcd, 0x5b, 0x07, 0, 0, 0, 0],
      // Attributes in two pieces, with a link (13) between them.
      ...bytes.len(9, [...bytes.len(1, bytes.text('a')), ...bytes.len(2, bytes.len(1, bytes.text('x')))]),
      ...bytes.len(13, bytes.len(1, [...TRACE])),
      ...bytes.len(9, [...bytes.len(1, bytes.text('b')), ...bytes.len(2, [...bytes.tag(2, 0), 1])]),
    ];
    const body = Buffer.from(bytes.len(1, bytes.len(2, bytes.len(2, spanBody))));
    const span = readTraceRequest(body).resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
    assert.equal(span.name, 'chat');
    assert.equal(span.startTimeUnixNano, '123456789');
    assert.deepEqual(span.attributes, { a: 'x', b: true });
    assert.equal(countTraceSpans(body), 1);
  });

  test('a known field of another wire type is skipped, as a later schema’s reader skips it; message fields merge', () => {
    const spanBody = [
      ...bytes.len(1, [...TRACE]),
      ...bytes.len(2, [...SPAN]),
      // The name as a varint, the kind as bytes, a start time as a fixed32: each skipped.
      ...bytes.tag(5, 0),
      7,
      ...bytes.len(6, [1, 2]),
      ...bytes.tag(7, 5),
      ...[1, 2, 3, 4],
      ...bytes.len(5, bytes.text('chat')),
      // A kind and a status code of -2: ten-byte varints, read as their int32.
      ...bytes.tag(6, 0),
      ...bytes.varint(-2),
      // The status in two pieces: its code, then its message (a code as bytes between them, skipped).
      ...bytes.len(15, [...bytes.tag(3, 0), ...bytes.varint(-2)]),
      ...bytes.len(15, [...bytes.len(3, [9]), ...bytes.len(2, bytes.text('upstream 503'))]),
      // Booleans whose set bits are past the first 32.
      ...bytes.len(9, [
        ...bytes.len(1, bytes.text('high bit')),
        ...bytes.len(2, [...bytes.tag(2, 0), ...bytes.varint(2n ** 40n)]),
      ]),
      ...bytes.len(9, [...bytes.len(1, bytes.text('zero')), ...bytes.len(2, [...bytes.tag(2, 0), ...bytes.varint(0)])]),
    ];
    const scopeSpans = [
      ...bytes.len(1, bytes.len(1, bytes.text('scope'))),
      ...bytes.len(2, spanBody),
      ...bytes.len(1, bytes.len(2, bytes.text('1.2.3'))),
    ];
    const request = readTraceRequest(Buffer.from(bytes.len(1, bytes.len(2, scopeSpans))));
    const scope = request.resourceSpans[0]!.scopeSpans[0]!;
    assert.deepEqual(scope.scope, { name: 'scope', version: '1.2.3' });
    const span = scope.spans[0]!;
    assert.deepEqual(
      [span.name, span.kind, span.startTimeUnixNano, span.status],
      ['chat', -2, '0', { code: -2, message: 'upstream 503' }],
    );
    assert.deepEqual(span.attributes, { 'high bit': true, zero: false });
  });

  test('bytes that are not a request are a 400 naming where, never a crash or a hang', () => {
    const span = bytes.len(5, bytes.text('s'));
    const inRequest = (spanBytes: number[]) => Buffer.from(bytes.len(1, bytes.len(2, bytes.len(2, spanBytes))));
    const cases: Array<[string, Buffer, RegExp]> = [
      ['a wire type protobuf lacks', Buffer.from([...bytes.tag(9, 7)]), /invalid wire type 7 at offset 1/],
      ['an end of group alone', Buffer.from([...bytes.tag(12, 4)]), /invalid wire type 4 at offset 1/],
      ['field number 0', Buffer.from([0x02, 0x00]), /field number 0 at offset 0/],
      [
        'a length past its message (inside the body)',
        Buffer.from([...bytes.len(1, [...bytes.tag(2, 2), 50]), ...Array<number>(60).fill(0)]),
        /index out of range: 4 \+ 50 > 4/,
      ],
      ['a body cut short', inRequest(span).subarray(0, 6), /index out of range/],
      [
        'a varint of 11 bytes',
        Buffer.from([...bytes.tag(9, 0), ...Array<number>(10).fill(0xff), 0x01]),
        /varint longer than 10/,
      ],
      ['an unclosed group', Buffer.from([...bytes.tag(9, 3), ...bytes.tag(1, 0), 1]), /index out of range/],
    ];
    for (const [what, body, pattern] of cases) {
      assert.throws(() => readTraceRequest(body), invalidWith(pattern), what);
      assert.throws(
        () => decodeTraceRequest(body, PROTOBUF, undefined, MAX),
        invalidWith(/^OTLP protobuf body is not a valid ExportTraceServiceRequest \(/),
        what,
      );
    }
  });

  test(`messages nested deeper than ${MAX_PROTOBUF_DEPTH} levels are a 400 naming the depth, not a stack overflow`, () => {
    const inAttribute = (value: number[]) =>
      Buffer.from(
        bytes.len(
          1,
          bytes.len(2, bytes.len(2, bytes.len(9, [...bytes.len(1, bytes.text('k')), ...bytes.len(2, value)]))),
        ),
      );
    let value = bytes.len(1, bytes.text('x'));
    for (let i = 0; i < 1_000; i += 1) value = bytes.len(5, bytes.len(1, value));
    const deep = inAttribute(value);
    assert.throws(() => readTraceRequest(deep), invalidWith(/nested deeper than 256 levels; flatten the attributes/));
    let groups: number[] = [];
    for (let i = 0; i < 1_000; i += 1) groups = [...bytes.tag(9, 3), ...groups, ...bytes.tag(9, 4)];
    assert.throws(() => readTraceRequest(Buffer.from(groups)), invalidWith(/nested deeper than 256 levels/));
    // 60 levels of values (what the store keeps 64 of) read fine.
    let kept = bytes.len(1, bytes.text('x'));
    for (let i = 0; i < 60; i += 1) kept = bytes.len(5, bytes.len(1, kept));
    const attributes = readTraceRequest(inAttribute(kept)).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    let depth = 0;
    for (let at: unknown = attributes.k; Array.isArray(at); at = at[0]) depth += 1;
    assert.equal(depth, 60);
  });

  test('groups, spans and events past the decoding budget are a 413 as they are counted; attributes and values are not counted', () => {
    // Entries: the resource group, the scope group, the span and its event — 4; before reading, the two groups and the
    // span. The attributes (the resource's, the span's, the event's) and the array's values are not entries.
    const body = oneSpanWire(
      [
        { key: 'a', value: { stringValue: 'x' } },
        { key: 'list', value: { arrayValue: { values: [{ intValue: 1 }, { intValue: 2 }, { intValue: 3 }] } } },
      ],
      {
        events: [
          { name: 'e', timeUnixNano: Long.fromNumber(1, true), attributes: [{ key: 'k', value: { boolValue: true } }] },
        ],
      },
    );
    const tooMany = (budget: number) => (error: unknown) =>
      error instanceof PayloadTooLargeError &&
      error.message.includes(`more than ${budget} resource and scope groups, spans and events`) &&
      /export smaller batches \(or raise LIGHTNING_OTLP_WORKER_HEAP_MB\)/.test(error.message);
    assert.equal(readTraceRequest(body, 4).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.events.length, 1);
    assert.throws(() => readTraceRequest(body, 3), tooMany(3));
    assert.equal(countTraceSpans(body, 3), 1);
    assert.throws(() => countTraceSpans(body, 2), tooMany(2));
    // Empty entries are two bytes each on the wire and a hundred or more decoded: a million empty resource groups is a
    // 2 MB body.
    const empties = Buffer.alloc(2_000_000, Buffer.from([0x0a, 0x00]));
    assert.throws(() => countTraceSpans(empties, 999_999), tooMany(999_999));
    assert.equal(countTraceSpans(empties, 1_000_000), 0);
  });

  test('any corruption of a real export reads or is a 400, nothing else', () => {
    const body = encode(
      recordSpans((tracer) => {
        for (let i = 0; i < 8; i += 1)
          tracer
            .startSpan(`chat ${i}`, { attributes: { 'gen_ai.response.id': `r${i}`, list: [1, 2], f: 0.5, b: true } })
            .end();
      }),
      'protobuf',
    );
    let seed = 12345;
    const random = (below: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % below;
    };
    let refused = 0;
    for (let i = 0; i < 3_000; i += 1) {
      const copy = Buffer.from(body);
      for (let flips = 1 + random(4); flips > 0; flips -= 1) copy[random(copy.length)] = random(256);
      const cut = i % 5 === 0 ? copy.subarray(0, random(copy.length)) : copy;
      try {
        const request = readTraceRequest(cut);
        const spans = request.resourceSpans.flatMap((r) => r.scopeSpans).flatMap((scope) => scope.spans);
        assert.equal(countTraceSpans(cut), spans.length, `case ${i}`);
      } catch (error) {
        assert.ok(error instanceof InvalidInputError, `${String(error)} (case ${i})`);
        refused += 1;
      }
    }
    assert.ok(refused > 500 && refused < 3_000, `${refused} refused`);
  });

  test('the answer: partial success as the collector’s own decoder reads it, empty when all were accepted', () => {
    assert.equal(writeExportResponse(0, '').length, 0);
    for (const rejected of [1, 300, 2 ** 40]) {
      const message = `${rejected} spans rejected: ✗ ${'m'.repeat(200)}`;
      const decoded = ExportTraceServiceResponse.decode(writeExportResponse(rejected, message));
      assert.equal(String(decoded.partialSuccess?.rejectedSpans), String(rejected));
      assert.equal(decoded.partialSuccess?.errorMessage, message);
    }
  });
});
