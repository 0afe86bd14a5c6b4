/**
 * OTLP decoding off the daemon's main thread (bundled to dist/otlp-worker.js): the main thread
 * keeps serving requests and committing spans while a worker turns the next export into spans.
 */
import { parentPort } from 'node:worker_threads';
import { decodeTraceRequest } from './decode';
import { normalizeTraceRequest } from './normalize';

export interface DecodeJob {
  readonly id: number;
  readonly body: Uint8Array;
  readonly contentType: string | undefined;
  readonly contentEncoding: string | undefined;
  readonly maxBytes: number;
}

parentPort?.on('message', (job: DecodeJob) => {
  try {
    const body = Buffer.from(job.body.buffer, job.body.byteOffset, job.body.byteLength);
    const result = normalizeTraceRequest(decodeTraceRequest(body, job.contentType, job.contentEncoding, job.maxBytes));
    parentPort!.postMessage({ id: job.id, ok: true, result });
  } catch (error) {
    const { name, message } = error instanceof Error ? error : { name: 'Error', message: String(error) };
    parentPort!.postMessage({ id: job.id, ok: false, error: { name, message } });
  }
});
