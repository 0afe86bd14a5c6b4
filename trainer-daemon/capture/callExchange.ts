/**
 * One proxied call in flight: what it has learned so far (status, whether it streams, first byte, encoding), its
 * reassembler, and the two ways it ends — `finish` records it once, `fail` records it and then answers the agent
 * with the error the record names. Each phase of the proxy (upstreamRequest.ts, upstreamAnswer.ts, relayStream.ts,
 * relayBody.ts) fills it in; proxy.ts makes one per call and commits its record.
 */
import type { ServerResponse } from 'node:http';
import type { CallOutcome } from '../protocol';
import type { JsonObject } from '../protocol/json';
import { StreamReassembler, type Api, type Reassembler } from './reassemble';
import { AnthropicReassembler } from './anthropic';
import { GeminiReassembler } from './gemini';
import type { ProxyCall } from './proxyCall';

/** What the record of a call says, taken when the call ends. */
export interface CallEnd {
  readonly status: number | null;
  readonly streamed: boolean;
  readonly startMs: number;
  readonly firstByteMs: number | null;
  /** The Content-Encoding the upstream used although asked for identity (its body decoded), if any. */
  readonly contentEncoding: string | null;
  readonly error: string | null;
  readonly responseJson: JsonObject | null;
  readonly outcome: CallOutcome;
}

/** The reassembler that rebuilds an answer of `api` from its stream events. */
function reassemblerFor(api: Api): Reassembler {
  if (api === 'anthropic.messages') return new AnthropicReassembler();
  if (api === 'gemini.generate_content') return new GeminiReassembler();
  return new StreamReassembler(api);
}

/**
 * An error the daemon answers itself, in the API's shape (`shape`) or OpenAI's; a started response is broken instead.
 */
export function sendError(
  response: ServerResponse,
  status: number,
  type: string,
  message: string,
  shape?: ProxyCall['errorBody'],
): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const body = JSON.stringify(shape ? shape(status, type, message) : { error: { message, type, code: type } });
  const retry = status === 429 || status === 503 ? { 'retry-after': '1' } : {};
  response.writeHead(status, {
    ...retry,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  response.end(body);
}

/** One call's state between the phases; it ends once (`finish`), whichever phase ends it first. */
export class CallExchange {
  /** The upstream's HTTP status, once it answered. */
  status: number | null = null;
  streamed = false;
  firstByteMs: number | null = null;
  contentEncoding: string | null = null;
  readonly startMs = Date.now();
  /** Rebuilds the answer for the record; none for a call the proxy does not record (no known API). */
  readonly reassembler: Reassembler | undefined;
  private finished: Promise<boolean> | undefined;

  constructor(
    readonly call: ProxyCall,
    /** The upstream's base URL (shown redacted in messages). */
    readonly base: string,
    /** The agent's response. */
    readonly response: ServerResponse,
    /**
     * Records the call; resolves true once committed (or when there is nothing to record), false when it could not be.
     */
    private readonly commit: (end: CallEnd) => Promise<boolean>,
    /** Called once the record is settled: the call is over for the proxy. */
    private readonly settled: () => void,
  ) {
    this.reassembler = call.api ? reassemblerFor(call.api) : undefined;
  }

  /** Whether the call has ended (recorded or being recorded): later events of its sockets change nothing. */
  get ended(): boolean {
    return this.finished !== undefined;
  }

  /** Records the call once; resolves true when the record is committed (or there is none to make). */
  finish(error: string | null, responseJson: JsonObject | null, outcome: CallOutcome): Promise<boolean> {
    this.finished ??= this.commit({
      status: this.status,
      streamed: this.streamed,
      startMs: this.startMs,
      firstByteMs: this.firstByteMs,
      contentEncoding: this.contentEncoding,
      error,
      responseJson,
      outcome,
    }).finally(this.settled);
    return this.finished;
  }

  /** The answer reassembled so far, for a call that ends early: only a stream has one. */
  partial(): JsonObject | null {
    return this.reassembler && this.streamed ? this.reassembler.result() : null;
  }

  /** Answers with an error once the call is recorded (the error is what the record says too). */
  fail(
    httpStatus: number,
    type: string,
    message: string,
    outcome: CallOutcome = { kind: 'upstream_error', status: httpStatus },
  ): void {
    void this.finish(message, this.partial(), outcome).then(() =>
      sendError(this.response, httpStatus, type, message, this.call.errorBody),
    );
  }
}
