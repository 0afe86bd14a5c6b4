/**
 * JSON-RPC ids, one per pending request. vscode-jsonrpc queues incoming requests by id, so a second
 * request with the id of one not yet answered replaced it in the queue: one of the two was never run
 * nor answered. The RPC server reads and writes through these instead: such a request is refused at
 * once (-32600, naming the id) and the first goes on; an id is free again once its answer is sent.
 */
import type WebSocket from 'ws';
import type { DataCallback, Disposable, Message } from 'vscode-jsonrpc/node';
import { RpcCode } from '../protocol/errors';
import { WebSocketMessageReader, WebSocketMessageWriter } from '../protocol/node/wsTransport';

type Id = string | number;

function idOf(message: Message, kind: 'request' | 'response'): Id | undefined {
  const { id, method } = message as { id?: unknown; method?: unknown };
  if (kind === 'request' ? typeof method !== 'string' : method !== undefined) return undefined;
  return typeof id === 'string' || typeof id === 'number' ? id : undefined;
}

/** vscode-jsonrpc's queue holds `1` and `"1"` under one key: so do we, and a pending `1` refuses a `"1"`. */
const keyOf = (id: Id): string => String(id);

/** The ids of one connection's requests not yet answered. */
export class PendingRequestIds {
  private readonly pending = new Set<string>();

  /** Takes the request's id, or returns the refusal to send when another pending request holds it. */
  admit(message: Message): Message | undefined {
    const id = idOf(message, 'request');
    if (id === undefined) return undefined;
    if (!this.pending.has(keyOf(id))) {
      this.pending.add(keyOf(id));
      return undefined;
    }
    const text = `request id ${JSON.stringify(id)} is already in use by a request not yet answered; give each pending request its own id (this one was not run)`;
    return { jsonrpc: '2.0', id, error: { code: RpcCode.InvalidRequest, message: text } } as Message;
  }

  /** Frees the id an answer is for. */
  answered(message: Message): void {
    const id = idOf(message, 'response');
    if (id !== undefined) this.pending.delete(keyOf(id));
  }
}

/** Reads requests, passing on only those whose id no pending request holds; refusals go straight back. */
export class UniqueIdReader extends WebSocketMessageReader {
  constructor(
    private readonly ws: WebSocket,
    private readonly ids: PendingRequestIds,
    onMalformed: (raw: string, reason: string) => void,
  ) {
    super(ws, onMalformed);
  }

  override listen(callback: DataCallback): Disposable {
    return super.listen((message) => {
      const refusal = this.ids.admit(message);
      // Sent past the writer: the refusal must not free the id the first request still holds.
      if (refusal) this.ws.send(JSON.stringify(refusal));
      else callback(message);
    });
  }
}

/** Writes answers, freeing each one's id. */
export class UniqueIdWriter extends WebSocketMessageWriter {
  constructor(
    socket: WebSocket,
    private readonly ids: PendingRequestIds,
    maxBufferedBytes: number,
  ) {
    super(socket, maxBufferedBytes);
  }

  override write(message: Message): Promise<void> {
    this.ids.answered(message);
    return super.write(message);
  }
}
