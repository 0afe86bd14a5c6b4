/**
 * What Debug with Lightning reads of a debug session to end its rollout: the Debug Adapter Protocol
 * messages its adapter sends (`exited` events, `output` events, `exceptionInfo` answers), for the session
 * and its child sessions (js-debug runs the program in a child), and from them the rollout's final status
 * with its reason: the exception and the output's last lines, secrets redacted (protocol/failure.ts). Pure,
 * free of `vscode`: the extension feeds it, a unit test feeds it recorded message sequences.
 */
import {
  envSecrets,
  exceptionFromInfo,
  exceptionOf,
  failureText,
  OutputTail,
} from '../../trainer-daemon/protocol/failure';
import { isSecretVariable } from '../../trainer-daemon/protocol/secrets';
import { finalStatus } from './launchConfig';

/** What is read of a Debug Adapter Protocol message (an adapter may send anything: every field is checked). */
export interface AdapterMessage {
  type?: string;
  event?: string;
  command?: string;
  success?: boolean;
  body?: { exitCode?: unknown; output?: unknown; category?: unknown; exceptionId?: unknown; description?: unknown };
  /** A request's arguments (`terminate` and `disconnect` say `restart`). */
  arguments?: { restart?: unknown };
}

export type FinalStatus = ReturnType<typeof finalStatus>;

export class SessionRecords {
  /** Exit codes reported by debug adapters (`exited` events), by session id. */
  private readonly exitCodes = new Map<string, number>();
  /** The end of each session's output (`output` events: the program's stderr and stdout, the adapter's console). */
  private readonly outputs = new Map<string, OutputTail>();
  /** The exception a session stopped on (`exceptionInfo`), by session id. */
  private readonly exceptions = new Map<string, string>();
  /** Parent session ids, by child session id. */
  private readonly parents = new Map<string, string>();

  /** A session started; a child session's messages count for its parent's rollout. */
  started(sessionId: string, parentId?: string): void {
    if (parentId !== undefined) this.parents.set(sessionId, parentId);
  }

  /** A message the session's adapter sent to the editor. */
  observe(sessionId: string, message: AdapterMessage): void {
    if (message.type === 'event' && message.event === 'exited' && typeof message.body?.exitCode === 'number')
      this.exitCodes.set(sessionId, message.body.exitCode);
    if (
      message.type === 'event' &&
      message.event === 'output' &&
      typeof message.body?.output === 'string' &&
      message.body.category !== 'telemetry'
    ) {
      let tail = this.outputs.get(sessionId);
      if (!tail) this.outputs.set(sessionId, (tail = new OutputTail()));
      tail.push(message.body.output);
    }
    if (message.type === 'response' && message.command === 'exceptionInfo' && message.success && message.body) {
      const exception = exceptionFromInfo(message.body);
      if (exception) this.exceptions.set(sessionId, exception);
    }
  }

  /** The exit code an adapter reported for the session or one of its child sessions. */
  reportedExitCode(sessionId: string): number | undefined {
    return (
      this.exitCodes.get(sessionId) ??
      [...this.exitCodes.entries()].find(([id]) => this.parents.get(id) === sessionId)?.[1]
    );
  }

  /**
   * The rollout's final transition for how the program ended (its exit code; undefined: it reported none). A
   * failure gets the session's (and its child sessions') output and exception, with the secrets of `env` (the
   * session's environment over the editor's) redacted; a stop, the exception it stopped at.
   */
  final(
    sessionId: string,
    exitCode: number | undefined,
    env: Readonly<Record<string, string | undefined>>,
  ): FinalStatus {
    const final = finalStatus(exitCode);
    const ids = [sessionId, ...this.childrenOf(sessionId)];
    const output = ids
      .map((id) => this.outputs.get(id)?.text ?? '')
      .filter(Boolean)
      .join('\n');
    const stoppedAt = ids.map((id) => this.exceptions.get(id)).find(Boolean);
    if (final.to === 'failed')
      return {
        ...final,
        error: failureText(
          final.error ?? 'failed',
          output,
          envSecrets(env, isSecretVariable),
          exceptionOf(output) ?? stoppedAt,
        ),
      };
    if (final.to === 'cancelled' && stoppedAt)
      return { ...final, error: `${final.error ?? 'cancelled'}; it had stopped at ${stoppedAt}` };
    return final;
  }

  /** Drops what was held for the session and its child sessions. */
  forget(sessionId: string): void {
    for (const id of [sessionId, ...this.childrenOf(sessionId)]) {
      this.exitCodes.delete(id);
      this.outputs.delete(id);
      this.exceptions.delete(id);
      this.parents.delete(id);
    }
  }

  private childrenOf(sessionId: string): string[] {
    return [...this.parents].filter(([, parent]) => parent === sessionId).map(([id]) => id);
  }
}
