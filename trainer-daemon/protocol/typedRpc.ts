/**
 * The protocol's checks around a vscode-jsonrpc connection, written once for every client (the
 * CLI's RpcClient, the extension's DaemonClient): params checked before sending, results and
 * notifications checked on arrival, with the same schemas the daemon uses.
 */
import type { Disposable, MessageConnection } from 'vscode-jsonrpc';
import {
  Methods,
  Notifications,
  type MethodName,
  type NotificationName,
  type NotificationParamsOf,
  type ParamsOf,
  type ResultOf,
} from './rpc';
import { describeIssues } from './validation';

export type Checked<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly message: string };

export function checkParams<M extends MethodName>(name: M, params: ParamsOf<M>): Checked<ParamsOf<M>> {
  const checked = Methods[name].params.safeParse(params);
  return checked.success
    ? { ok: true, value: params }
    : { ok: false, message: describeIssues(checked.error, 'params') };
}

export function checkResult<M extends MethodName>(name: M, raw: unknown): Checked<ResultOf<M>> {
  const spec = Methods[name];
  const result = spec.result.safeParse(raw);
  return result.success
    ? { ok: true, value: result.data as ResultOf<M> }
    : {
        ok: false,
        message: `the daemon sent an invalid ${spec.method} result: ${describeIssues(result.error, 'result')}`,
      };
}

/** Listens to a notification; malformed ones are dropped. */
export function onCheckedNotification<N extends NotificationName>(
  connection: MessageConnection,
  name: N,
  listener: (params: NotificationParamsOf<N>) => void,
): Disposable {
  const spec = Notifications[name];
  return connection.onNotification(spec.method, (raw: unknown) => {
    const parsed = spec.params.safeParse(raw);
    if (parsed.success) listener(parsed.data as NotificationParamsOf<N>);
  });
}
