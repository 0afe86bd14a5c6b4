/** The record's SSE parser: line endings split anywhere across chunks, and its cap checked as data arrives. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SseParser } from '../../trainer-daemon/capture/sseParser';

function parse(chunks: string[], max = 1_000): { events: string[]; overflow: boolean } {
  const events: string[] = [];
  const parser = new SseParser((data) => events.push(data), max);
  for (const chunk of chunks) parser.feed(chunk);
  parser.end();
  return { events, overflow: parser.overflow };
}

test('events split on LF, CRLF and CR, wherever the chunks break', () => {
  const stream =
    'data: a\n\ndata: b\r\n\r\ndata:c\r\rdata: d\ndata: e\n\n: comment\nevent: x\nid: 1\ndata: f\n\ndata: unfinished';
  const expected = ['a', 'b', 'c', 'd\ne', 'f'];
  assert.deepEqual(parse([stream]).events, expected);
  for (let cut = 1; cut < stream.length; cut += 1) {
    assert.deepEqual(parse([stream.slice(0, cut), stream.slice(cut)]).events, expected, `cut at ${cut}`);
  }
  assert.deepEqual(parse([...stream]).events, expected, 'one character at a time');
});

test('a line or an event past the cap stops the parser, without holding it', () => {
  assert.equal(parse([`data: ${'x'.repeat(2_000)}\n\n`]).overflow, true, 'one long line');
  assert.equal(parse(['data: ', 'x'.repeat(600), 'x'.repeat(600)]).overflow, true, 'a line that never ends');
  const many = parse(Array.from({ length: 30 }, () => `data: ${'y'.repeat(50)}\n`));
  assert.equal(many.overflow, true, 'one event of many data lines');
  assert.deepEqual(many.events, []);
  const fine = parse(Array.from({ length: 30 }, () => `data: ${'y'.repeat(50)}\n\n`));
  assert.equal(fine.overflow, false, 'many small events are fine');
  assert.equal(fine.events.length, 30);
});
