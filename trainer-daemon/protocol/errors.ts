/**
 * The one error contract, used on both sides of every boundary. The daemon throws a `DaemonError`
 * (one subclass per kind); `mapError` gives its JSON-RPC code and HTTP status; the RPC server sends
 * the kind as `error.data.kind`; the clients (the CLI's, the extension's) rebuild a `DaemonError`
 * with the same kind. Callers switch on `kind`, never on a number or on message text. Messages name
 * what was wrong and what to do.
 */
import { z } from 'zod';

/** The stable, machine-readable kinds of error. */
export const ErrorKind = z.enum([
  'invalid_input',
  'payload_too_large',
  'unsupported_media_type',
  'unauthorized',
  'overloaded',
  'not_found',
  'invalid_transition',
  'conflict',
  'trainer_unavailable',
  'internal',
]);
export type ErrorKind = z.infer<typeof ErrorKind>;

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
  Overloaded: -32003,
  Unauthorized: -32001,
  TrainerUnavailable: -32011,
} as const;

/** Each kind's JSON-RPC code and HTTP status. */
const KINDS: Record<ErrorKind, { readonly rpcCode: number; readonly httpStatus: number }> = {
  invalid_input: { rpcCode: RpcCode.InvalidParams, httpStatus: 400 },
  payload_too_large: { rpcCode: RpcCode.InvalidParams, httpStatus: 413 },
  unsupported_media_type: { rpcCode: RpcCode.InvalidParams, httpStatus: 415 },
  unauthorized: { rpcCode: RpcCode.Unauthorized, httpStatus: 401 },
  overloaded: { rpcCode: RpcCode.Overloaded, httpStatus: 503 },
  not_found: { rpcCode: RpcCode.NotFound, httpStatus: 404 },
  invalid_transition: { rpcCode: RpcCode.InvalidTransition, httpStatus: 409 },
  conflict: { rpcCode: RpcCode.Conflict, httpStatus: 409 },
  trainer_unavailable: { rpcCode: RpcCode.TrainerUnavailable, httpStatus: 503 },
  internal: { rpcCode: RpcCode.InternalError, httpStatus: 500 },
};

/** The one error base class: its name is the subclass's. */
export class LightningError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** An error of a known kind: thrown by the daemon, and rebuilt by the clients from `error.data.kind`. */
export class DaemonError extends LightningError {
  /** The JSON-RPC code it travels with (the other side switches on `kind`, not on this). */
  readonly code: number;

  constructor(
    readonly kind: ErrorKind,
    message: string,
    options?: ErrorOptions & { readonly code?: number },
  ) {
    super(message, options);
    this.code = options?.code ?? KINDS[kind].rpcCode;
  }
}

/** The caller sent something malformed: a bad field, a bad argument. */
export class InvalidInputError extends DaemonError {
  constructor(
    message: string,
    options?: ErrorOptions,
    kind: 'invalid_input' | 'payload_too_large' | 'unsupported_media_type' = 'invalid_input',
  ) {
    super(kind, message, options);
  }
}
/** A body over the size limit (HTTP 413). */
export class PayloadTooLargeError extends InvalidInputError {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options, 'payload_too_large');
  }
}
/** A body in a media type or encoding the endpoint does not take (HTTP 415). */
export class UnsupportedMediaTypeError extends InvalidInputError {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options, 'unsupported_media_type');
  }
}
/** A `DaemonError` subclass whose kind is fixed: `class NotFoundError extends ofKind('not_found') {}`. */
function ofKind(kind: ErrorKind): new (message: string, options?: ErrorOptions) => DaemonError {
  return class extends DaemonError {
    constructor(message: string, options?: ErrorOptions) {
      super(kind, message, options);
    }
  };
}

/**
 * The request carries no credential this endpoint accepts (HTTP 401): the shared OTLP endpoint without a rollout key or
 * the token.
 */
export class UnauthorizedError extends ofKind('unauthorized') {}
/** The daemon cannot take more work right now; retry shortly (HTTP 503). */
export class OverloadedError extends ofKind('overloaded') {}
/**
 * The store cannot take the write now — the disk is full, the file is locked by another process,
 * an I/O error — and nothing was written; retry later (HTTP 503 with Retry-After, never a 200).
 */
export class StorageUnavailableError extends OverloadedError {}
/** A rollout, span or other record that does not exist. */
export class NotFoundError extends ofKind('not_found') {}
/** A rollout asked to move to a status its current status cannot reach. */
export class InvalidTransitionError extends ofKind('invalid_transition') {}
/** The state of things forbids the request (e.g. a second daemon on the same store). */
export class ConflictError extends ofKind('conflict') {}
/**
 * No Python here can run the trainer worker (none with PyTorch, or the chosen one cannot start):
 * `lightning doctor --setup` (the editor's Set Up Trainer) fixes it.
 */
export class TrainerUnavailableError extends ofKind('trainer_unavailable') {}

export interface ErrorMapping {
  readonly rpcCode: number;
  readonly httpStatus: number;
  readonly kind: ErrorKind;
}

/** How an error travels: its kind, JSON-RPC code and HTTP status; anything not a `DaemonError` is internal. */
export function mapError(error: unknown): ErrorMapping {
  const kind = error instanceof DaemonError ? error.kind : 'internal';
  return { kind, ...KINDS[kind] };
}

/** The `DaemonError` a JSON-RPC error response stands for: its `data.kind`, else internal. */
export function fromResponseError(message: string, code: number, data: unknown): DaemonError {
  const parsed = ErrorKind.safeParse((data as { kind?: unknown } | null | undefined)?.kind);
  return new DaemonError(parsed.success ? parsed.data : 'internal', message, { code });
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
