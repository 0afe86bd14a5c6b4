/**
 * JSON-RPC framing over a WebSocket: one JSON-RPC message per text frame. Both ends use it (the
 * daemon's RPC server, the CLI, the extension's language-client transport), so the framing is
 * written once. A frame that is not JSON is reported through `onMalformed` so the server can
 * answer with a JSON-RPC parse error instead of dropping it silently.
 */
import type WebSocket from 'ws';
import {
  AbstractMessageReader,
  AbstractMessageWriter,
  type DataCallback,
  type Disposable,
  type Message,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc/node';

export class WebSocketMessageReader extends AbstractMessageReader implements MessageReader {
  constructor(
    private readonly socket: WebSocket,
    private readonly onMalformed: (raw: string, reason: string) => void = () => {},
  ) {
    super();
    socket.on('error', (error) => this.fireError(error));
    socket.on('close', () => this.fireClose());
  }

  listen(callback: DataCallback): Disposable {
    const onMessage = (data: WebSocket.RawData, isBinary: boolean): void => {
      const text = isBinary
        ? ''
        : Buffer.isBuffer(data)
          ? data.toString('utf8')
          : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]).toString('utf8');
      let message: unknown;
      try {
        message = JSON.parse(text);
      } catch {
        this.onMalformed(
          text,
          isBinary ? 'binary frames are not accepted; send JSON text' : 'the frame is not valid JSON',
        );
        return;
      }
      if (
        typeof message !== 'object' ||
        message === null ||
        Array.isArray(message) ||
        (message as { jsonrpc?: unknown }).jsonrpc !== '2.0'
      ) {
        this.onMalformed(
          text,
          Array.isArray(message)
            ? 'batch requests are not supported; send one message per frame'
            : 'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")',
        );
        return;
      }
      callback(message as Message);
    };
    this.socket.on('message', onMessage);
    return { dispose: () => this.socket.off('message', onMessage) };
  }
}

export class WebSocketMessageWriter extends AbstractMessageWriter implements MessageWriter {
  private errorCount = 0;

  /**
   * `maxBufferedBytes`: a peer that stops reading makes sent frames pile up in this process; past
   * this many unsent bytes the socket is dropped (and its buffers freed) instead of memory growing
   * without bound. The peer sees the connection close and may reconnect.
   */
  constructor(
    private readonly socket: WebSocket,
    private readonly maxBufferedBytes = Infinity,
  ) {
    super();
  }

  write(message: Message): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.socket.readyState !== this.socket.OPEN) {
        reject(new Error('the WebSocket is closed'));
        return;
      }
      if (this.socket.bufferedAmount > this.maxBufferedBytes) {
        this.socket.terminate();
        const error = new Error(
          `the peer is not reading: over ${this.maxBufferedBytes} bytes were waiting to be sent, so the connection was dropped`,
        );
        this.errorCount += 1;
        this.fireError(error, message, this.errorCount);
        reject(error);
        return;
      }
      this.socket.send(JSON.stringify(message), (error) => {
        if (!error) return resolve();
        this.errorCount += 1;
        this.fireError(error, message, this.errorCount);
        reject(error);
      });
    });
  }

  end(): void {
    this.socket.close();
  }
}
