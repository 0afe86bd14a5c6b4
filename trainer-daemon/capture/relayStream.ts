/**
 * A streamed answer (server-sent events): each chunk goes to the agent as it arrives, with backpressure, while an SSE
 * parser feeds the call's reassembler for the record. The record stops growing at its limits (the agent still gets
 * every byte); the stream's end reaches the agent only after the record is committed.
 */
import { StringDecoder } from 'node:string_decoder';
import type { CallOutcome } from '../protocol';
import { RECORD_LIMITS } from '../protocol/recordScrub';
import type { Api, Reassembler } from './reassemble';
import type { CallExchange } from './callExchange';
import type { UpstreamBody } from './upstreamAnswer';
import { SseParser } from './sseParser';
import { streamContentChars } from './streamContent';

/** An SSE parser that adds each event's JSON to `reassembler`, up to the record's content limit. */
function recordingParser(api: Api | null, reassembler: Reassembler | undefined, maxEventChars: number): SseParser {
  let reassembled = 0;
  // One line or event past maxEventChars stops the record's parser (the agent still gets every byte).
  return new SseParser((data) => {
    if (!reassembler || !api) return;
    if (data === '[DONE]') return reassembler.done?.();
    if (reassembler.truncated) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      reassembler.error ??= 'the upstream sent an event that is not JSON';
      return;
    }
    // The record of a huge stream stops growing at the record limit (its content, not the SSE framing); the agent still
    // gets all of it.
    reassembled += streamContentChars(api, parsed);
    if (reassembled > RECORD_LIMITS.maxRecordChars) {
      reassembler.truncated = true;
      return;
    }
    reassembler.add(parsed);
  }, maxEventChars);
}

/** How a stream that reached its end ended, for the record. */
function streamEnd(
  exchange: CallExchange,
  parser: SseParser,
  status: number,
): { error: string | null; result: ReturnType<Reassembler['result']> | null; outcome: CallOutcome } {
  const { reassembler } = exchange;
  if (parser.overflow && reassembler) reassembler.truncated = true;
  const result = reassembler?.result() ?? null;
  if (parser.overflow && result)
    result.lightning_truncated = `the upstream sent an SSE line or event over the ${parser.maxChars}-character limit; the agent got all of it, the record stops there`;
  // An error event inside a 200 stream is an upstream error too, and so is a stream that ended before its last event
  // (a connection closed cleanly mid-answer): the answer is not whole.
  const cut =
    reassembler !== undefined && !reassembler.truncated && !parser.overflow && !reassembler.complete
      ? 'the stream ended before its last event: the answer is not whole'
      : null;
  const error = status >= 400 ? `upstream HTTP ${status}` : (reassembler?.error ?? cut);
  const truncatedBy = parser.overflow ? 'sse_event' : 'stream_content';
  const outcome: CallOutcome =
    error !== null
      ? { kind: 'upstream_error', status }
      : reassembler?.truncated
        ? { kind: 'truncated', limit: truncatedBy }
        : { kind: 'ok' };
  return { error, result, outcome };
}

/**
 * Relays a streamed answer to the agent chunk by chunk and records it; the agent's stream ends after the commit. The
 * record's parser stops at an SSE line or event over `maxEventChars` (the agent still gets every byte).
 */
export function relayStream(exchange: CallExchange, body: UpstreamBody, maxEventChars: number): void {
  const { response } = exchange;
  const { upstreamResponse, source, decoder, headers, status } = body;
  response.writeHead(status, headers);
  response.flushHeaders();
  const parser = recordingParser(exchange.call.api, exchange.reassembler, maxEventChars);
  // A character split across two network chunks must not be split in the record.
  const utf8 = new StringDecoder('utf8');
  let ended = false;
  source.on('data', (chunk: Buffer) => {
    exchange.firstByteMs ??= Date.now();
    // Backpressure: a slow agent slows the upstream read instead of growing memory.
    if (!response.write(chunk)) {
      source.pause();
      response.once('drain', () => source.resume());
    }
    parser.feed(utf8.write(chunk));
  });
  source.on('end', () => {
    ended = true;
    parser.feed(utf8.end());
    parser.end();
    const { error, result, outcome } = streamEnd(exchange, parser, status);
    // The stream's end is the agent's acknowledgement: it comes after the commit.
    void exchange.finish(error, result, outcome).then((committed) => (committed ? response.end() : response.destroy()));
  });
  // The upstream dropped the stream: the agent must not wait forever, and the call is recorded.
  upstreamResponse.on('close', () => {
    // A whole compressed body still has its decoder's end to come.
    if (ended || exchange.ended || (decoder && upstreamResponse.complete)) return;
    void exchange
      .finish('the upstream stream broke before it ended', exchange.reassembler?.result() ?? null, {
        kind: 'upstream_error',
        status,
      })
      .then(() => response.destroy());
  });
}
