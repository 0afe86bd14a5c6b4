/**
 * Runs OTLP decoding in a worker thread when the bundled worker is there (the daemon), inline
 * otherwise (tests importing the sources). Errors keep their kind across the thread boundary, so
 * HTTP statuses stay the same either way.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../protocol/errors';
import type { NormalizedTraceRequest } from './normalize';
import type { DecodeJob } from './worker';

type Reply = { id: number; ok: true; result: NormalizedTraceRequest } | { id: number; ok: false; error: { name: string; message: string } };

const ERRORS: Record<string, new (message: string) => Error> = {
  InvalidInputError,
  UnsupportedMediaTypeError,
  PayloadTooLargeError,
};

export class DecodePool {
  private worker: Worker | undefined;
  private next = 0;
  private readonly pending = new Map<number, { resolve(value: NormalizedTraceRequest): void; reject(error: Error): void }>();

  constructor(workerFile = path.join(__dirname, 'otlp-worker.js')) {
    if (!fs.existsSync(workerFile)) return;
    this.worker = new Worker(workerFile);
    this.worker.unref();
    this.worker.on('message', (reply: Reply) => {
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      this.pending.delete(reply.id);
      if (reply.ok) waiting.resolve(reply.result);
      else waiting.reject(new (ERRORS[reply.error.name] ?? Error)(reply.error.message));
    });
    this.worker.on('error', (error) => {
      // A crashed worker: fail what waits on it and decode inline from now on.
      for (const waiting of this.pending.values()) waiting.reject(error);
      this.pending.clear();
      this.worker = undefined;
    });
  }

  decode(body: Buffer, contentType: string | undefined, contentEncoding: string | undefined, maxBytes: number): Promise<NormalizedTraceRequest> {
    if (!this.worker) {
      // Loaded on first use only: the decoder's generated module is large and the daemon has the worker.
      return Promise.resolve().then(() => {
        const { decodeTraceRequest } = require('./decode') as typeof import('./decode');
        const { normalizeTraceRequest } = require('./normalize') as typeof import('./normalize');
        return normalizeTraceRequest(decodeTraceRequest(body, contentType, contentEncoding, maxBytes));
      });
    }
    const id = (this.next += 1);
    const job: DecodeJob = { id, body, contentType, contentEncoding, maxBytes };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker!.postMessage(job);
    });
  }

  async close(): Promise<void> {
    await this.worker?.terminate();
    this.worker = undefined;
  }
}
