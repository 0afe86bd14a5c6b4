/**
 * A real VS Code in a real browser for end-to-end tests: code-server on 127.0.0.1 port 0 with fresh user-data,
 * extensions and config folders, driven by playwright-core with Debian's chromium. Two editors
 * (test/provision/index.mjs, installed on demand by `npm test`): the oldest VS Code `engines.vscode` claims and
 * the current stable (on its own Node 24). The extension is loaded from this repository
 * (extensionDevelopmentPath), or installed from a built .vsix as a user would.
 * See ../../../shared/recipes/vscode-e2e (findings on these machines).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { BrowserContext, Frame, FrameLocator, Locator, Page } from 'playwright-core';
import { rolloutCount } from '../../trainer-daemon/protocol/format';
import { ensureBrowserDriver, ensureEditor } from '../provision/index.mjs';
import { REPO_ROOT } from './daemon';
import { waitFor } from './tmp';

export const CHROMIUM = process.env.LIGHTNING_E2E_CHROMIUM ?? '/usr/bin/chromium';
export const EXTENSION_ID = 'lightning-dev.lightning';

export type EditorName = 'oldest' | 'current';

/**
 * playwright-core from the provisioned driver folder (not a dependency of the project: npm ci installs no browser
 * driver).
 */
function playwright(): typeof import('playwright-core') {
  const dir = process.env.LIGHTNING_E2E_DRIVER ?? ensureBrowserDriver();
  return createRequire(path.join(dir, 'package.json'))(dir) as typeof import('playwright-core');
}

/** The provisioned code-server of this editor and the PATH it runs with (its own Node first). */
function editorInstall(which: EditorName): { codeServer: string; path: string } {
  const key = which.toUpperCase();
  const codeServer = process.env[`LIGHTNING_E2E_CODE_SERVER_${key}`];
  const searchPath = process.env[`LIGHTNING_E2E_PATH_${key}`];
  if (codeServer && searchPath) return { codeServer, path: searchPath };
  const editor = ensureEditor(which);
  return { codeServer: editor.codeServer, path: editor.env.PATH };
}

export interface WorkbenchOptions {
  /** Which VS Code (default: the oldest claimed, which runs on this machine's Node). */
  readonly editor?: EditorName;
  /** Install this .vsix into the fresh extensions folder instead of loading the checkout. */
  readonly vsix?: string;
  /** More .vsix files installed beside it (test-only extensions, e.g. the `debugpy` debug type). */
  readonly extensions?: readonly string[];
  /**
   * Wraps the server's command line, e.g. to run it in a mount namespace that hides /usr/bin/node: gets the
   * command and its arguments, returns the ones to spawn.
   */
  readonly wrap?: (command: string, args: string[]) => [string, string[]];
  /** Replaces PATH for the editor (and so for the extension host and its daemon). */
  readonly searchPath?: string;
}

export interface Workbench {
  readonly page: Page;
  readonly serverLog: () => string;
  /** The folder holding the server's logs (the extension's LogOutputChannel among them). */
  readonly userDataDir: string;
  /** Opens the same workspace in another window (a browser tab: its own extension host). */
  openWindow(): Promise<Page>;
  close(): Promise<void>;
}

const USER_SETTINGS = {
  'workbench.startupEditor': 'none',
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'workbench.tips.enabled': false,
  'security.workspace.trust.enabled': false,
  'workbench.enableExperiments': false,
  'chat.disableAIFeatures': true,
  'debug.openDebug': 'neverOpen',
  'debug.internalConsoleOptions': 'neverOpen',
};

/** Starts code-server on `workspace` and opens it in chromium with the extension (the checkout, or `options.vsix`). */
export async function openWorkbench(
  workspace: string,
  scratch: string,
  options: WorkbenchOptions = {},
): Promise<Workbench> {
  const install = editorInstall(options.editor ?? 'oldest');
  const userDataDir = path.join(scratch, 'user-data');
  const extensionsDir = path.join(scratch, 'extensions');
  const xdg = path.join(scratch, 'xdg');
  fs.mkdirSync(path.join(userDataDir, 'User'), { recursive: true });
  fs.mkdirSync(extensionsDir, { recursive: true });
  fs.mkdirSync(xdg, { recursive: true });
  fs.writeFileSync(path.join(userDataDir, 'User', 'settings.json'), JSON.stringify(USER_SETTINGS));
  fs.writeFileSync(path.join(scratch, 'config.yaml'), 'auth: none\n');
  const env = { ...process.env, XDG_CONFIG_HOME: xdg, XDG_DATA_HOME: xdg, PATH: options.searchPath ?? install.path };
  const common = [
    '--config',
    path.join(scratch, 'config.yaml'),
    '--user-data-dir',
    userDataDir,
    '--extensions-dir',
    extensionsDir,
  ];
  const wrap = options.wrap ?? ((command: string, args: string[]): [string, string[]] => [command, args]);
  for (const vsix of [...(options.vsix ? [options.vsix] : []), ...(options.extensions ?? [])])
    await installVsix(wrap, install.codeServer, common, vsix, env);
  const [command, args] = wrap(install.codeServer, [
    ...common,
    '--auth',
    'none',
    '--bind-addr',
    '127.0.0.1:0',
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-workspace-trust',
    '--disable-getting-started-override',
    workspace,
  ]);
  const server: ChildProcess = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let log = '';
  server.stdout!.setEncoding('utf8').on('data', (chunk: string) => (log += chunk));
  server.stderr!.setEncoding('utf8').on('data', (chunk: string) => (log += chunk));
  const url = await waitFor(
    () => /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log)?.[1],
    `code-server to listen (log: ${log})`,
    60_000,
  );
  let context: BrowserContext | undefined;
  const close = async (): Promise<void> => {
    await context?.close().catch(() => undefined);
    // code-server runs the extension host (and the daemon it spawned) in its process group.
    if (server.pid && server.exitCode === null) process.kill(-server.pid, 'SIGTERM');
    await new Promise((resolve) => (server.exitCode === null ? server.once('exit', resolve) : resolve(undefined)));
  };
  try {
    context = await playwright().chromium.launchPersistentContext(path.join(scratch, 'chromium'), {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1400, height: 900 },
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    const host = new URL(url).host;
    const query = options.vsix
      ? ''
      : `&payload=${encodeURIComponent(JSON.stringify([['extensionDevelopmentPath', `vscode-remote://${host}${REPO_ROOT}`]]))}`;
    const browser = context;
    const openWindow = async (page?: Page): Promise<Page> => {
      const window = page ?? (await browser.newPage());
      await window.goto(`${url}/?folder=${encodeURIComponent(workspace)}${query}`);
      await window.locator('.monaco-workbench .statusbar').waitFor({ timeout: 60_000 });
      return window;
    };
    const page = await openWindow(context.pages()[0]);
    return { page, serverLog: () => log, userDataDir, openWindow: () => openWindow(), close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** `code-server --install-extension FILE.vsix` into the fresh extensions folder, as a user installs one. */
async function installVsix(
  wrap: NonNullable<WorkbenchOptions['wrap']>,
  codeServer: string,
  common: string[],
  vsix: string,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  const [command, args] = wrap(codeServer, [...common, '--install-extension', vsix]);
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0 || !/successfully installed/i.test(output))
    throw new Error(`installing ${vsix} failed (exit ${code}): ${output}`);
}

/**
 * Runs a command from the command palette (F1), waiting for its row before pressing Enter. F1 can be
 * swallowed while the workbench restores, and a palette can close under a notification or a focus
 * change: each step is retried, and F1 is pressed only while the palette is closed (it toggles).
 * An open palette lists the commands known when it opened (a window whose extensions are still
 * loading has none of ours yet), so a retry closes it and opens a fresh one.
 */
export async function runCommand(page: Page, title: string): Promise<void> {
  const input = page.locator('.quick-input-widget input');
  for (let attempt = 0; ; attempt += 1) {
    try {
      if (!(await input.isVisible())) await page.keyboard.press('F1');
      await input.waitFor({ state: 'visible', timeout: 3_000 });
      await input.fill(`>${title}`, { timeout: 3_000 });
      await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor({ timeout: 10_000 });
      await page.keyboard.press('Enter');
      return;
    } catch (error) {
      if (attempt === 5) throw error;
      if (await input.isVisible()) await page.keyboard.press('Escape');
    }
  }
}

/** Picks the quick pick row with this text (the quick input is already open). */
export async function pickQuickItem(page: Page, text: string): Promise<void> {
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: text }).first();
  await row.waitFor({ timeout: 15_000 });
  // A hover left over a row (its description's tooltip) can cover the next row: move the mouse away first.
  await page.mouse.move(0, 0);
  await row.click();
}

/**
 * Opens `file` (a path in the workspace) with Go to File and resolves once its tab is the active one. The name goes
 * into the Go to File box only once that box is open (typed sooner, keys land in the editor behind it), its exact row
 * is clicked (an Enter can arrive after the box closed under a focus change), and the whole step is tried again if the
 * tab did not open.
 */
export async function openFile(page: Page, file: string): Promise<void> {
  const name = path.basename(file);
  const input = page.locator('.quick-input-widget input');
  for (let attempt = 1; ; attempt += 1) {
    try {
      await runCommand(page, 'Go to File');
      // The palette's own box says `>Go to File` until Go to File has replaced it with its (empty) one.
      await waitFor(
        async () => (await input.isVisible()) && !(await input.inputValue()).startsWith('>'),
        'the Go to File box',
      );
      await input.fill(file, { timeout: 3_000 });
      await pickQuickLabel(page, name);
      await page.locator('.tab.active', { hasText: name }).waitFor({ timeout: 10_000 });
      return;
    } catch (error) {
      if (attempt === 3) throw error;
      if (await input.isVisible()) await page.keyboard.press('Escape');
    }
  }
}

/**
 * Opens `file` of the workspace (Go to File) and sets a breakpoint (F9) on the first line containing `text`;
 * resolves with that line (1-based) once the editor shows the breakpoint.
 */
export async function setBreakpoint(page: Page, workspace: string, file: string, text: string): Promise<number> {
  const line =
    fs
      .readFileSync(path.join(workspace, file), 'utf8')
      .split('\n')
      .findIndex((candidate) => candidate.includes(text)) + 1;
  if (line === 0) throw new Error(`no line of ${file} contains ${JSON.stringify(text)}`);
  await openFile(page, file);
  await page.locator('.monaco-editor .view-lines').first().waitFor({ timeout: 15_000 });
  // The editor renders only the lines in view: go to the line first, then see it.
  await goToLine(page, line);
  await page.locator('.monaco-editor .view-lines', { hasText: text }).waitFor({ timeout: 15_000 });
  await page.keyboard.press('F9');
  await page.locator('.codicon-debug-breakpoint').first().waitFor({ timeout: 10_000 });
  return line;
}

/**
 * Moves the active editor's cursor to `line` (and `column`) with Go to Line, and waits until the status bar says it is
 * there: keys typed before the Go to Line box has opened (a busy machine) go to the editor instead, so the box is
 * waited for, and the whole move tried again if the cursor did not arrive.
 */
export async function goToLine(page: Page, line: number, column?: number): Promise<void> {
  const where = column === undefined ? `Ln ${line},` : `Ln ${line}, Col ${column}`;
  const arrived = page.locator('.statusbar-item', { hasText: where }).first();
  for (let attempt = 1; ; attempt++) {
    await page.keyboard.press('Control+G');
    await page.locator('.quick-input-widget input').waitFor({ state: 'visible', timeout: 15_000 });
    await page.keyboard.type(column === undefined ? String(line) : `${line}:${column}`);
    await page.keyboard.press('Enter');
    try {
      await arrived.waitFor({ timeout: 5_000 });
      return;
    } catch (error) {
      if (attempt === 3) throw error;
      await page.keyboard.press('Escape');
    }
  }
}

/**
 * Picks the quick pick row whose label is exactly `label` (a row's description can name another row's label;
 * a leading codicon renders no text).
 */
export async function pickQuickLabel(page: Page, label: string): Promise<void> {
  const escaped = label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const row = page
    .locator('.quick-input-widget .quick-input-list .monaco-list-row')
    .filter({ has: page.locator('.label-name', { hasText: new RegExp(`^\\s*${escaped}\\s*$`) }) })
    .first();
  await row.waitFor({ timeout: 15_000 });
  await page.mouse.move(0, 0);
  await row.click();
}

/**
 * Answers the input box titled `title` with `value` (none: the value it shows) and accepts it. The value is filled into
 * the box itself (keys typed before the box has focus would go elsewhere); Enter is pressed again while the box stays
 * open without a validation message (a keypress lost while the workbench is busy), and a validation message fails the
 * test with its text.
 */
export async function answerInputBox(page: Page, title: string, value?: string): Promise<void> {
  const box = page.locator('.quick-input-widget', { has: page.locator('.quick-input-title', { hasText: title }) });
  await box.waitFor({ timeout: 15_000 });
  const input = box.locator('.quick-input-box input');
  if (value !== undefined) await input.fill(value, { timeout: 5_000 });
  for (let attempt = 0; ; attempt += 1) {
    await input.press('Enter', { timeout: 5_000 }).catch(() => undefined);
    try {
      await box.waitFor({ state: 'hidden', timeout: 3_000 });
      return;
    } catch (error) {
      const message = await box
        .locator('.quick-input-message')
        .textContent()
        .catch(() => '');
      if (message && message.trim() && (await box.locator('.inputBox.error, .monaco-inputbox.error').count()) > 0)
        throw new Error(
          `the input box "${title}" refused ${JSON.stringify(value ?? (await input.inputValue()))}: ${message.trim()}`,
          { cause: error },
        );
      if (attempt === 4) throw error;
    }
  }
}

/**
 * Runs a command that opens a quick pick and picks `item` in it. A focus change right after the
 * command (a view revealing itself, a notification) can close the quick pick before the click: then
 * the command is run again, up to three times.
 */
export async function runCommandAndPick(page: Page, title: string, item: string): Promise<void> {
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: item }).first();
  for (let attempt = 0; ; attempt += 1) {
    await runCommand(page, title);
    try {
      await row.waitFor({ timeout: 15_000 });
      await row.click({ timeout: 5_000 });
      return;
    } catch (error) {
      if (attempt === 2) throw error;
      if (await page.locator('.quick-input-widget input').isVisible()) await page.keyboard.press('Escape');
    }
  }
}

/**
 * Presses the debug toolbar's Continue if the debuggee is paused now (for a loop waiting for a program to end). The
 * button goes as soon as the debuggee runs again, so the click waits for it briefly: with Playwright's default 30 s, a
 * click on a button that had just gone held the loop half a minute, in most runs of the restart tests.
 */
export async function continueIfPaused(page: Page): Promise<void> {
  const paused = page.locator('.debug-toolbar .codicon-debug-continue');
  if (await paused.isVisible().catch(() => false)) await paused.click({ timeout: 1_000 }).catch(() => undefined);
}

/**
 * The extension's side panel: two nested iframes (the webview host and its active frame). Its editor tabs are
 * webviews of the same extension: VS Code marks a view's iframe with `purpose=webviewView`.
 */
export function panelFrame(page: Page): FrameLocator {
  return page
    .frameLocator(`iframe.webview.ready[src*="extensionId=${EXTENSION_ID}"][src*="purpose=webviewView"]`)
    .frameLocator('#active-frame');
}

export function statusBarItem(page: Page): Locator {
  return page.locator('.statusbar-item', { hasText: 'Lightning' }).first();
}

/** The panel's count and the status bar item both say `total` rollouts: one count, shown in both places. */
export async function countShown(page: Page, total: number): Promise<void> {
  await panelFrame(page)
    .locator('.toolbar .count', { hasText: new RegExp(`^${rolloutCount(total)}$`) })
    .waitFor({ timeout: 15_000 });
  await statusBarItem(page)
    .filter({ hasText: rolloutCount(total) })
    .waitFor({ timeout: 15_000 });
}

/**
 * The frame (a webview's inner document: an editor tab's, the panel's) in which `selector` matches, once there is one.
 */
export async function frameWith(page: Page, selector: string, timeout = 60_000): Promise<Frame> {
  return waitFor(
    async () => {
      for (const frame of page.frames())
        if (
          (await frame
            .locator(selector)
            .count()
            .catch(() => 0)) > 0
        )
          return frame;
      return undefined;
    },
    `a frame with ${selector}`,
    timeout,
  );
}
