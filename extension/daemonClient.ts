/**
 * The extension's connection to the daemon: the protocol's one client connection
 * (`trainer-daemon/protocol/node/connection.ts`, the same the CLI uses), traced in the output channel when
 * `lightning.trace.server` is `messages`: each request, response and notification by method, id and
 * duration, never params or results (they carry prompts). The supervision (restart with backoff, give up
 * after repeated crashes) is supervisor.ts. vscode-languageclient is not used: see docs/daemon.md, "Why not a
 * LanguageClient".
 */
import * as vscode from 'vscode';
import { Trace } from 'vscode-jsonrpc/node';
import { RpcClient } from '../trainer-daemon/protocol/node/connection';

export type DaemonClient = RpcClient;

export type TraceSetting = 'off' | 'messages';

export function readTraceSetting(): TraceSetting {
  return vscode.workspace.getConfiguration('lightning').get<string>('trace.server') === 'messages' ? 'messages' : 'off';
}

/** Connects to the daemon at `url` with its token; with tracing on, every RPC is logged under `[rpc]`. */
export async function connectDaemon(
  url: string,
  token: string,
  log: vscode.LogOutputChannel,
  trace: TraceSetting = readTraceSetting(),
): Promise<DaemonClient> {
  const client = await RpcClient.connect(url, token);
  if (trace === 'messages')
    await client.connection.trace(Trace.Messages, {
      log: (message: unknown) => log.info(`[rpc] ${typeof message === 'string' ? message : JSON.stringify(message)}`),
    });
  return client;
}
