/**
 * A method's params as the RPC boundary hands them on: the input-shaped object a client sends,
 * parsed with the protocol's schema for that method (defaults filled in; bad input refused with the
 * boundary's InvalidInputError naming the field). What tests give the store's use-case methods,
 * which take parsed params.
 */
import type { MethodName, ParamsOf, ParsedParamsOf } from '../../trainer-daemon/protocol';
import { parseParams } from '../../trainer-daemon/rpc/handlers';

export function parsed<M extends MethodName>(method: M, params: ParamsOf<M>): ParsedParamsOf<M> {
  return parseParams(method, params);
}
