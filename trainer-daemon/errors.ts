/**
 * One error base class for the daemon, and one function mapping errors to JSON-RPC codes and HTTP
 * statuses. Messages name what was wrong and what to do.
 */
export class LightningError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The caller sent something malformed: a bad field, a bad argument. */
export class InvalidInputError extends LightningError {}
/** A body over the size limit (HTTP 413). */
export class PayloadTooLargeError extends InvalidInputError {}
/** A body in a media type or encoding the endpoint does not take (HTTP 415). */
export class UnsupportedMediaTypeError extends InvalidInputError {}
/** The daemon cannot take more work right now; retry shortly (HTTP 503). */
export class OverloadedError extends LightningError {}
/**
 * The store cannot take the write now — the disk is full, the file is locked by another process,
 * an I/O error — and nothing was written; retry later (HTTP 503 with Retry-After, never a 200).
 */
export class StorageUnavailableError extends OverloadedError {}
/** A rollout, span or other record that does not exist. */
export class NotFoundError extends LightningError {}
/** A rollout asked to move to a status its current status cannot reach. */
export class InvalidTransitionError extends LightningError {}
/** The state of things forbids the request (e.g. a second daemon on the same store). */
export class ConflictError extends LightningError {}
/** Missing or wrong credentials. */
export class UnauthorizedError extends LightningError {}

/** JSON-RPC 2.0 codes: the reserved ones, and application codes in the -32000..-32099 server range. */
export const RpcCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  NotFound: -32004,
  Conflict: -32009,
  InvalidTransition: -32010,
  Unauthorized: -32001,
  Overloaded: -32003,
} as const;

export interface ErrorMapping {
  readonly rpcCode: number;
  readonly httpStatus: number;
  /** Stable machine-readable name of the kind of error. */
  readonly kind: string;
}

export function mapError(error: unknown): ErrorMapping {
  if (error instanceof PayloadTooLargeError) return { rpcCode: RpcCode.InvalidParams, httpStatus: 413, kind: 'payload_too_large' };
  if (error instanceof UnsupportedMediaTypeError) return { rpcCode: RpcCode.InvalidParams, httpStatus: 415, kind: 'unsupported_media_type' };
  if (error instanceof InvalidInputError) return { rpcCode: RpcCode.InvalidParams, httpStatus: 400, kind: 'invalid_input' };
  if (error instanceof OverloadedError) return { rpcCode: RpcCode.Overloaded, httpStatus: 503, kind: 'overloaded' };
  if (error instanceof NotFoundError) return { rpcCode: RpcCode.NotFound, httpStatus: 404, kind: 'not_found' };
  if (error instanceof InvalidTransitionError) return { rpcCode: RpcCode.InvalidTransition, httpStatus: 409, kind: 'invalid_transition' };
  if (error instanceof ConflictError) return { rpcCode: RpcCode.Conflict, httpStatus: 409, kind: 'conflict' };
  if (error instanceof UnauthorizedError) return { rpcCode: RpcCode.Unauthorized, httpStatus: 401, kind: 'unauthorized' };
  return { rpcCode: RpcCode.InternalError, httpStatus: 500, kind: 'internal' };
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
