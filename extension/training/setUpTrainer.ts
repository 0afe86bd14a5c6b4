/**
 * **Lightning: Set Up Trainer**: runs `lightning doctor` (the CLI process Import Dataset uses) under a
 * progress notification, writes its report to the Lightning log, and says whether the trainer is
 * ready; when it is not, offers **Create Environment** (`doctor --setup`: a venv at .lightning/venv
 * with torch), with or without the Hugging Face packages (`--hf`). Where pip reaches no package
 * index, the exact apt-get line the CLI printed is shown, with a button to copy it.
 */
import * as vscode from 'vscode';
import type { CliRun, LightningCli } from '../datasets/cliProcess';
import { doctorSummary, type DoctorSummary } from './doctorReport';

export class TrainerSetup {
  constructor(
    private readonly cli: LightningCli,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  async run(): Promise<void> {
    const check = await this.withProgress(
      'Lightning: checking the trainer (Python, PyTorch, GPU)…',
      false,
      (report, token) =>
        this.cli.run(['doctor', '--json'], { token, onStderrLine: (line) => line.startsWith('{') || report(line) }),
    );
    await this.tell(this.logged(doctorSummary(check.stdout, check.stderr)));
  }

  private async setUp(hf: boolean): Promise<void> {
    const run = await this.withProgress(
      `Lightning: setting up the trainer in .lightning/venv${hf ? ' (with transformers and peft)' : ''}…`,
      true,
      (report, token) =>
        this.cli.run(['doctor', '--setup', '--json', ...(hf ? ['--hf'] : [])], {
          token,
          onStderrLine: (line) => line.startsWith('{') || report(line),
        }),
    );
    await this.tell(this.logged(doctorSummary(run.stdout, run.stderr)));
  }

  private async withProgress(
    title: string,
    cancellable: boolean,
    task: (report: (line: string) => void, token: vscode.CancellationToken) => Promise<CliRun>,
  ): Promise<CliRun> {
    const run = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title, cancellable },
      (progress, token) =>
        task((line) => {
          this.log.info(`[trainer] ${line}`);
          progress.report({ message: line.slice(0, 200) });
        }, token),
    );
    return run;
  }

  /** The report goes to the log as `lightning doctor` prints it. */
  private logged(summary: DoctorSummary): DoctorSummary {
    for (const line of summary.text.split('\n')) this.log.info(`[trainer] ${line}`);
    return summary;
  }

  private async tell(summary: DoctorSummary): Promise<void> {
    if (summary.ready) {
      const hf = summary.hfMissing ? ' Hugging Face models also need transformers and peft.' : '';
      const choice = await vscode.window.showInformationMessage(
        `Lightning: the trainer is ready: ${summary.headline}.${hf}`,
        ...(hf ? ['Add Hugging Face Packages'] : []),
        'Show Report',
      );
      if (choice === 'Add Hugging Face Packages') await this.setUp(true);
      if (choice === 'Show Report') this.log.show();
      return;
    }
    if (summary.aptCommand) {
      const choice = await vscode.window.showWarningMessage(
        `Lightning: pip could not install PyTorch (no package index reachable?). On Debian/Ubuntu, as root: ${summary.aptCommand}`,
        'Copy Command',
        'Show Report',
      );
      if (choice === 'Copy Command') await vscode.env.clipboard.writeText(summary.aptCommand);
      if (choice === 'Show Report') this.log.show();
      return;
    }
    const choice = await vscode.window.showWarningMessage(
      `Lightning: the trainer is not ready: ${summary.problem ?? 'see the report'}.`,
      'Create Environment',
      'Create with Hugging Face',
      'Show Report',
    );
    if (choice === 'Create Environment') await this.setUp(false);
    if (choice === 'Create with Hugging Face') await this.setUp(true);
    if (choice === 'Show Report') this.log.show();
  }
}
