/**
 * The extension's live view of the store: re-subscribes to the daemon's notifications on every
 * (re)connection and re-emits them as events for the panel and the status bar, and remembers the
 * rollout the user is looking at (what Annotate Reward acts on).
 */
import * as vscode from 'vscode';
import type { NotificationParamsOf, Rollout } from '../trainer-daemon/protocol';
import type { DaemonClient } from './daemonClient';
import type { DaemonSupervisor } from './supervisor';

export class LiveRollouts implements vscode.Disposable {
  private readonly _onDidChangeRollouts = new vscode.EventEmitter<readonly Rollout[]>();
  readonly onDidChangeRollouts = this._onDidChangeRollouts.event;
  private readonly _onDidAddSpans = new vscode.EventEmitter<NotificationParamsOf<'spansAdded'>['rollouts']>();
  readonly onDidAddSpans = this._onDidAddSpans.event;
  private readonly _onDidRequestReveal = new vscode.EventEmitter<Rollout>();
  /** Something outside the panel (the review queue) wants a rollout shown. */
  readonly onDidRequestReveal = this._onDidRequestReveal.event;
  private subscriptions: vscode.Disposable[] = [];
  private readonly connection: vscode.Disposable;
  /** The rollout selected in the panel. */
  selectedId: string | undefined;

  constructor(readonly supervisor: DaemonSupervisor) {
    this.connection = supervisor.onDidConnect((client) => this.subscribe(client));
  }

  private subscribe(client: DaemonClient): void {
    for (const subscription of this.subscriptions) subscription.dispose();
    this.subscriptions = [
      client.onNotification('rolloutsChanged', ({ rollouts }) => this._onDidChangeRollouts.fire(rollouts)),
      client.onNotification('spansAdded', ({ rollouts }) => this._onDidAddSpans.fire(rollouts)),
    ];
  }

  reveal(rollout: Rollout): void {
    this.selectedId = rollout.id;
    this._onDidRequestReveal.fire(rollout);
  }

  dispose(): void {
    for (const subscription of this.subscriptions) subscription.dispose();
    this.connection.dispose();
    this._onDidChangeRollouts.dispose();
    this._onDidAddSpans.dispose();
    this._onDidRequestReveal.dispose();
  }
}
