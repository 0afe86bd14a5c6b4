/**
 * The extension's pure parts, in plain Node: daemon runtime resolution, restart backoff, launch
 * configuration instrumentation and the preloads it may pass, the store path, reward input, the
 * native-module message, and a built script's text made safe to carry inline in its page.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import {
  hasNodeSqlite,
  resolveRuntime,
  WINDOWS_MESSAGE,
  type HostRuntime,
  type VersionProbe,
} from '../../extension/runtime';
import { RestartPolicy } from '../../extension/restartPolicy';
import {
  exitCodeEnv,
  finalStatus,
  instrumentConfig,
  rolloutKey,
  runnableConfigurations,
  upstreamFor,
  wantsLightning,
  type LaunchConfig,
} from '../../extension/debug/launchConfig';
import { debugPreloads, type DebugPreloads } from '../../extension/debug/preloadFiles';
import { resolveStoreFile } from '../../extension/storePath';
import { tempDir } from '../helpers/tmp';
import { parseRewardInput } from '../../extension/rewardInput';
import { inlineText } from '../../extension/inlineText';
import { explainNativeLoadError, NativeModuleError } from '../../trainer-daemon/store/nativeModules';
import { PLACEHOLDER_API_KEY, userProviderUpstreams, type AgentRun } from '../../trainer-daemon/protocol';

const probe =
  (versions: Record<string, string>): VersionProbe =>
  async (command) =>
    versions[command];

describe('daemon runtime', () => {
  const desktop: HostRuntime = {
    execPath: '/editor',
    versions: { node: '22.15.1', electron: '35.5.1' },
    platform: 'linux',
  };

  it("runs on the editor's own runtime by default, whatever node is on PATH: Electron as Node in VS Code, plain Node in code-server", async () => {
    for (const versions of [{ node: 'v20.11.1' }, { node: 'v24.1.0' }, {}] as Array<Record<string, string>>) {
      const result = await resolveRuntime({
        nodePath: undefined,
        hostExecPath: '/editor',
        host: desktop,
        probe: probe(versions),
      });
      assert.ok(result.ok);
      assert.equal(result.runtime.command, '/editor');
      assert.deepEqual(result.runtime.env, { ELECTRON_RUN_AS_NODE: '1' });
      assert.match(result.runtime.description, /editor's own runtime .*Electron 35\.5\.1, Node 22\.15\.1/);
    }
    const codeServer = await resolveRuntime({
      nodePath: undefined,
      hostExecPath: '/cs/node',
      host: { execPath: '/cs/node', versions: { node: '24.22.3' }, platform: 'linux' },
      probe: probe({ node: 'v20.0.0' }),
    });
    assert.ok(codeServer.ok);
    assert.deepEqual([codeServer.runtime.command, codeServer.runtime.env], ['/cs/node', {}]);
  });

  it('an editor runtime without node:sqlite says which VS Code to update to, unless better-sqlite3 sits beside a checkout', async () => {
    const old: HostRuntime = {
      execPath: '/editor',
      versions: { node: '20.19.0', electron: '34.5.8' },
      platform: 'darwin',
    };
    const refused = await resolveRuntime({
      nodePath: undefined,
      hostExecPath: '/editor',
      host: old,
      probe: probe({ node: 'v22.14.0' }),
    });
    assert.match(
      !refused.ok ? refused.message : '',
      /Node 20\.19\.0\) has no built-in SQLite .*update VS Code to 1\.103 or later .*"lightning\.nodePath"/,
    );
    const checkout = await resolveRuntime({
      nodePath: undefined,
      hostExecPath: '/editor',
      host: old,
      probe: probe({}),
      betterSqlite3: true,
    });
    assert.ok(checkout.ok);
  });

  it("uses lightning.nodePath when it is a Node with node:sqlite (or any Node ≥ 20 beside a checkout's better-sqlite3)", async () => {
    const result = await resolveRuntime({
      nodePath: '/opt/node22/bin/node',
      hostExecPath: '/editor',
      host: desktop,
      probe: probe({ '/opt/node22/bin/node': 'v22.13.0\n', node: 'v20.0.0' }),
    });
    assert.ok(result.ok);
    assert.equal(result.runtime.command, '/opt/node22/bin/node');
    assert.deepEqual(result.runtime.env, {});
    const node20 = await resolveRuntime({
      nodePath: '/opt/node20',
      hostExecPath: '/editor',
      host: desktop,
      probe: probe({ '/opt/node20': 'v20.19.1' }),
      betterSqlite3: true,
    });
    assert.ok(node20.ok);
  });

  it('refuses a nodePath that is not Node, or has no node:sqlite, naming the setting and the real fix', async () => {
    const broken = await resolveRuntime({
      nodePath: '/bin/false',
      hostExecPath: '/editor',
      host: desktop,
      probe: probe({}),
    });
    assert.match(
      !broken.ok ? broken.message : '',
      /"lightning\.nodePath" is \/bin\/false.*Clear the setting to use the editor's own runtime, or point it at Node ≥ 22\.13\.0/,
    );
    const old = await resolveRuntime({
      nodePath: '/old/node',
      hostExecPath: '/editor',
      host: desktop,
      probe: probe({ '/old/node': 'v22.12.0' }),
    });
    assert.match(
      !old.ok ? old.message : '',
      /Node v22\.12\.0, which has no built-in SQLite \(node:sqlite needs Node ≥ 22\.13\.0\)\. Clear the setting/,
    );
  });

  it('on native Windows says in one sentence to use WSL, with the link', async () => {
    const result = await resolveRuntime({
      nodePath: undefined,
      hostExecPath: 'C:\\Code.exe',
      host: { ...desktop, platform: 'win32' },
      probe: probe({}),
    });
    assert.deepEqual(result, { ok: false, message: WINDOWS_MESSAGE });
    assert.match(
      WINDOWS_MESSAGE,
      /^Lightning runs on Linux and macOS; on Windows, open your folder in WSL \(https:\/\/code\.visualstudio\.com\/docs\/remote\/wsl\)[^.]*\.$/,
    );
  });

  it('knows which Node versions have node:sqlite unflagged', () => {
    assert.deepEqual(['v20.19.0', '22.12.0', '22.13.0', '23.3.0', '23.4.0', 'v24.0.0', '26.1.0'].map(hasNodeSqlite), [
      false,
      false,
      true,
      false,
      true,
      true,
      true,
    ]);
  });

  it('explains a native module built for another ABI: runtime, ABI and what to set', () => {
    const mismatch = new Error(
      "The module '/x/better_sqlite3.node' was compiled against a different Node.js version using NODE_MODULE_VERSION 115. This version of Node.js requires NODE_MODULE_VERSION 125.",
    );
    assert.throws(
      () => explainNativeLoadError(mismatch),
      (error: unknown) => {
        assert.ok(error instanceof NativeModuleError);
        assert.match(error.message, new RegExp(`ABI ${process.versions.modules}`));
        assert.match(error.message, /Node ≥ 22\.13.*clear the "lightning\.nodePath" setting/);
        assert.match(error.message, /NODE_MODULE_VERSION 115/);
        return true;
      },
    );
    const unrelated = new Error('SQLITE_CANTOPEN: unable to open database file');
    assert.throws(
      () => explainNativeLoadError(unrelated),
      (error: unknown) => error === unrelated,
    );
  });
});

describe('restart policy', () => {
  it('backs off exponentially up to a cap, then gives up after repeated crashes within the window', () => {
    const policy = new RestartPolicy({ maxCrashes: 4, windowMs: 60_000, baseDelayMs: 100, maxDelayMs: 500 });
    const delays = [0, 1, 2, 3].map((i) => policy.onCrash(1_000 + i));
    assert.deepEqual(
      delays,
      [100, 200, 400, 500].map((delayMs) => ({ action: 'restart', delayMs })),
    );
    assert.deepEqual(policy.onCrash(1_010), { action: 'giveUp', crashes: 5 });
  });

  it('forgets crashes older than the window, and all of them on reset', () => {
    const policy = new RestartPolicy({ maxCrashes: 2, windowMs: 1_000, baseDelayMs: 100, maxDelayMs: 10_000 });
    policy.onCrash(0);
    policy.onCrash(10);
    assert.deepEqual(policy.onCrash(5_000), { action: 'restart', delayMs: 100 });
    policy.onCrash(5_001);
    policy.reset();
    assert.deepEqual(policy.onCrash(5_002), { action: 'restart', delayMs: 100 });
  });
});

describe('Debug with Lightning configuration', () => {
  const run: AgentRun = {
    url: 'http://127.0.0.1:4242/r/abcdefghijklmnopqrstuvwx',
    rollout: { id: 'ro-1', task: null } as AgentRun['rollout'],
  };
  const node: LaunchConfig = {
    type: 'node',
    request: 'launch',
    name: 'agent',
    program: 'a.mjs',
    lightning: true,
    env: { MY_VAR: 'kept', OPENAI_API_KEY: 'sk-user' },
  };

  it('offers launch configurations only, and records those that ask for it once', () => {
    const attach: LaunchConfig = { type: 'node', request: 'attach', name: 'attach' };
    assert.deepEqual(
      runnableConfigurations([node, attach]).map((c) => c.name),
      ['agent'],
    );
    assert.equal(wantsLightning(node), true);
    assert.equal(wantsLightning({ ...node, lightning: undefined }), false);
    assert.equal(
      wantsLightning({ ...node, lightningRolloutId: 'ro-1' }),
      false,
      'a resolved configuration is not recorded twice',
    );
    assert.equal(
      wantsLightning({ ...node, __pendingTargetId: 'x' }),
      false,
      "js-debug's child session is not a second rollout",
    );
  });

  it("adds the instrumentation environment and keeps the user's variables", () => {
    const config = instrumentConfig(
      node,
      run,
      { PATH: '/usr/bin' },
      { recorder: '/ext/dist/exit-code.js', file: '/tmp/exit' },
    );
    const env = config.env as Record<string, string>;
    assert.equal(env.MY_VAR, 'kept');
    assert.equal(env.OPENAI_API_KEY, 'sk-user', "the user's key is left for the daemon to forward");
    assert.equal(env.OPENAI_BASE_URL, `${run.url}/v1`);
    assert.equal(env.LIGHTNING_ROLLOUT_ID, 'ro-1');
    assert.equal(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, `${run.url}/v1/traces`);
    assert.equal(env.ANTHROPIC_BASE_URL, run.url, 'the Anthropic SDKs append /v1/messages themselves');
    assert.equal(env.GOOGLE_GEMINI_BASE_URL, run.url, 'the Gemini SDKs append /v1beta/… themselves');
    assert.equal(env.NODE_OPTIONS, '--require "/ext/dist/exit-code.js"');
    assert.equal(env.LIGHTNING_EXIT_CODE_FILE, '/tmp/exit');
    assert.equal(config.lightningRolloutId, 'ro-1');
    assert.equal(config.program, 'a.mjs');
  });

  it("reads a restarted session's capability key back from its environment (LIGHTNING_URL), nothing else", () => {
    const key = 'A'.repeat(30) + '_-';
    assert.equal(rolloutKey({ LIGHTNING_URL: `http://127.0.0.1:4000/r/${key}` }), key);
    assert.equal(rolloutKey(instrumentConfig(node, { ...run, url: `http://127.0.0.1:4000/r/${key}` }, {}).env), key);
    assert.equal(rolloutKey({ LIGHTNING_URL: 'http://127.0.0.1:4000/b/batch' }), undefined, 'a batch URL is no key');
    assert.equal(rolloutKey({ LIGHTNING_URL: `http://127.0.0.1:4000/r/${key}x` }), undefined);
    assert.equal(rolloutKey({}), undefined);
    assert.equal(rolloutKey(undefined), undefined);
  });

  it('uses a placeholder key only when the user has none; their OPENAI_BASE_URL becomes the upstream', () => {
    const bare: LaunchConfig = { type: 'debugpy', request: 'launch', name: 'py', lightning: true };
    assert.equal((instrumentConfig(bare, run, {}).env as Record<string, string>).OPENAI_API_KEY, PLACEHOLDER_API_KEY);
    assert.equal(
      (instrumentConfig(bare, run, { OPENAI_API_KEY: 'sk-env' }).env as Record<string, string>).OPENAI_API_KEY,
      undefined,
    );
    assert.equal(
      (instrumentConfig(bare, run, {}).env as Record<string, string>).ANTHROPIC_API_KEY,
      PLACEHOLDER_API_KEY,
    );
    assert.equal(
      (instrumentConfig(bare, run, { ANTHROPIC_API_KEY: 'sk-ant' }).env as Record<string, string>).ANTHROPIC_API_KEY,
      undefined,
    );
    assert.equal(
      (instrumentConfig(bare, run, { GOOGLE_API_KEY: 'g' }).env as Record<string, string>).GEMINI_API_KEY,
      undefined,
    );
    assert.equal(
      upstreamFor({ ...bare, env: { OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1/' } }, {}),
      'http://127.0.0.1:11434/v1',
    );
    assert.equal(upstreamFor(bare, { OPENAI_API_BASE: 'http://gateway/v1' }), 'http://gateway/v1');
    assert.equal(upstreamFor(bare, {}), null);
  });

  it("reads the configuration's envFile as js-debug will: its upstream and key are the user's, env wins over it", (t) => {
    const dir = tempDir(t);
    fs.writeFileSync(
      path.join(dir, '.env'),
      [
        '# a local vLLM',
        'OPENAI_BASE_URL=http://127.0.0.1:8000/v1',
        'export OPENAI_API_KEY="sk-from-file"',
        'NODE_OPTIONS=--enable-source-maps',
        'MY_VAR=from-file',
      ].join('\n'),
    );
    const withFile: LaunchConfig = { ...node, env: { MY_VAR: 'kept' }, cwd: dir, envFile: '.env' };
    assert.equal(upstreamFor(withFile, {}), 'http://127.0.0.1:8000/v1', "the file's OPENAI_BASE_URL is the upstream");
    const env = instrumentConfig(withFile, run, {}, { recorder: '/ext/dist/exit-code.js', file: '/tmp/exit' })
      .env as Record<string, string>;
    assert.equal(env.OPENAI_API_KEY, undefined, "the file's key is the agent's: no placeholder over it");
    assert.equal(env.OPENAI_BASE_URL, `${run.url}/v1`, 'the agent still calls through its rollout');
    assert.equal(env.NODE_OPTIONS, '--enable-source-maps --require "/ext/dist/exit-code.js"');
    assert.equal(env.MY_VAR, 'kept');
    const missing: LaunchConfig = { ...node, env: {}, envFile: path.join(dir, 'absent.env') };
    assert.equal(upstreamFor(missing, {}), null, 'an envFile that cannot be read adds nothing (the debugger says why)');
  });

  it("preloads the exit-code recorder for Node only, after the user's own NODE_OPTIONS", () => {
    const recording = { recorder: '/ext dir/exit-code.js', file: '/tmp/exit' };
    assert.deepEqual(exitCodeEnv({ type: 'python', request: 'launch', name: 'py' }, recording, {}), {});
    assert.equal(
      exitCodeEnv({ ...node, env: { NODE_OPTIONS: '--max-old-space-size=4096' } }, recording, {}).NODE_OPTIONS,
      '--max-old-space-size=4096 --require "/ext dir/exit-code.js"',
    );
    assert.equal(
      exitCodeEnv({ ...node, type: 'pwa-node', env: {} }, recording, { NODE_OPTIONS: '--enable-source-maps' })
        .NODE_OPTIONS,
      '--enable-source-maps --require "/ext dir/exit-code.js"',
    );
  });

  it('preloads the capture preloads into every debuggee, and the exit-code recorder after them for Node', () => {
    const recording = { recorder: '/ext/dist/exit-code.js', file: '/tmp/exit' };
    const capture = {
      nodePreload: '/ext/dist/capture-preload.js',
      pythonSiteDir: '/ext/trainer-daemon/python/lightning_capture',
    };
    const nodeEnv = instrumentConfig(
      { ...node, env: { NODE_OPTIONS: '--inspect-port=0' } },
      run,
      {},
      recording,
      capture,
    ).env as Record<string, string>;
    assert.equal(
      nodeEnv.NODE_OPTIONS,
      '--inspect-port=0 --require "/ext/dist/capture-preload.js" --require "/ext/dist/exit-code.js"',
    );
    const python = instrumentConfig(
      { type: 'debugpy', request: 'launch', name: 'py', lightning: true },
      run,
      { PYTHONPATH: '/src' },
      recording,
      capture,
    ).env as Record<string, string>;
    assert.equal(
      python.NODE_OPTIONS,
      '--require "/ext/dist/capture-preload.js"',
      'a Node process the Python agent starts is captured too',
    );
    assert.equal(python.LIGHTNING_EXIT_CODE_FILE, undefined);
    assert.equal(
      python.PYTHONPATH,
      '/ext/trainer-daemon/python/lightning_capture:/src',
      'the capture sitecustomize first, then yours',
    );
  });

  it("points the user's ANTHROPIC_API_URL (LangChain reads it first) at the rollout too, and takes it as the upstream", () => {
    const bare: LaunchConfig = { type: 'node', request: 'launch', name: 'lc', lightning: true };
    assert.equal(
      (instrumentConfig(bare, run, {}).env as Record<string, string>).ANTHROPIC_API_URL,
      undefined,
      'not set for users who have none',
    );
    assert.equal(
      (instrumentConfig(bare, run, { ANTHROPIC_API_URL: 'https://gw/anthropic' }).env as Record<string, string>)
        .ANTHROPIC_API_URL,
      run.url,
    );
    assert.deepEqual(userProviderUpstreams({ ANTHROPIC_API_URL: 'https://gw/anthropic/' }), {
      anthropic: 'https://gw/anthropic',
    });
    assert.deepEqual(userProviderUpstreams({ ANTHROPIC_API_URL: 'https://gw/a', ANTHROPIC_BASE_URL: 'https://gw/b' }), {
      anthropic: 'https://gw/b',
    });
  });

  it('preloads only the files that exist: a missing --require would stop every Node debuggee at its start', (t) => {
    /** A Node debuggee under the configuration's env: its exit status and stderr. */
    const debuggee = (preloads: DebugPreloads): { status: number | null; stderr: string } => {
      const recording = preloads.exitCode ? { recorder: preloads.exitCode, file: '/tmp/exit' } : undefined;
      const env = instrumentConfig(node, run, {}, recording, preloads.capture).env as Record<string, string>;
      const child = spawnSync(process.execPath, ['-e', 'process.exit(0)'], {
        env: { PATH: process.env.PATH, NODE_OPTIONS: env.NODE_OPTIONS ?? '' },
        encoding: 'utf8',
      });
      return { status: child.status, stderr: child.stderr };
    };
    const bare = tempDir(t);
    const found = debugPreloads(bare);
    assert.deepEqual(found.preloads, { capture: {} });
    assert.deepEqual(found.missing, [
      path.join(bare, 'dist', 'exit-code.js'),
      path.join(bare, 'dist', 'capture-preload.js'),
      path.join(bare, 'trainer-daemon', 'python', 'lightning_capture', 'sitecustomize.py'),
    ]);
    assert.deepEqual(debuggee(found.preloads), { status: 0, stderr: '' }, 'the debuggee runs, without the preloads');
    // What the extension passed before it looked: the paths whether or not they exist.
    const blind: DebugPreloads = {
      exitCode: path.join(bare, 'dist', 'exit-code.js'),
      capture: { nodePreload: path.join(bare, 'dist', 'capture-preload.js') },
    };
    const crashed = debuggee(blind);
    assert.notEqual(crashed.status, 0);
    assert.match(crashed.stderr, /Cannot find module/);

    const built = tempDir(t);
    const site = path.join(built, 'trainer-daemon', 'python', 'lightning_capture');
    fs.mkdirSync(path.join(built, 'dist'));
    fs.mkdirSync(site, { recursive: true });
    const partial = debugPreloads(built);
    assert.deepEqual(partial.preloads, { capture: {} }, 'a folder without its sitecustomize.py is no preload');
    for (const file of ['exit-code.js', 'capture-preload.js'])
      fs.writeFileSync(path.join(built, 'dist', file), 'globalThis.preloaded = true;\n');
    fs.writeFileSync(path.join(site, 'sitecustomize.py'), '');
    const whole = debugPreloads(built);
    assert.deepEqual(whole, {
      preloads: {
        exitCode: path.join(built, 'dist', 'exit-code.js'),
        capture: { nodePreload: path.join(built, 'dist', 'capture-preload.js'), pythonSiteDir: site },
      },
      missing: [],
    });
    assert.deepEqual(debuggee(whole.preloads), { status: 0, stderr: '' });
  });

  it('maps the exit code to the final status', () => {
    assert.deepEqual(finalStatus(0), { to: 'succeeded', error: null });
    assert.deepEqual(finalStatus(3), { to: 'failed', error: 'exited with code 3' });
    assert.equal(finalStatus(undefined).to, 'cancelled');
  });
});

describe('settings and reward input', () => {
  it('resolves the store file like `lightning serve` in the workspace', () => {
    assert.equal(resolveStoreFile(undefined, '/ws', '/home/me'), path.join('/ws', '.lightning', 'store.db'));
    assert.equal(resolveStoreFile('data/s.db', '/ws', '/home/me'), '/ws/data/s.db');
    assert.equal(resolveStoreFile('~/stores/s.db', '/ws', '/home/me'), '/home/me/stores/s.db');
    assert.equal(resolveStoreFile('${workspaceFolder}/x.db', '/ws', '/home/me'), '/ws/x.db');
    assert.equal(resolveStoreFile(undefined, undefined, '/home/me'), '/home/me/.lightning-global/.lightning/store.db');
  });

  it('accepts 1, 0, 👍, 👎 and finite numbers; nothing else', () => {
    assert.deepEqual(
      ['1', '0', ' 0.25 ', '-2', '1e-3', '+', '👍', '👎'].map(parseRewardInput),
      [1, 0, 0.25, -2, 0.001, 1, 1, 0],
    );
    for (const bad of ['', 'n', 'one', '1,5', 'Infinity', 'NaN', '1e999', '0x10'])
      assert.equal(parseRewardInput(bad), undefined, bad);
  });
});

describe('a built script carried inline in its page', () => {
  it('cannot end its element or open a comment in it, and means the same to JavaScript and CSS', () => {
    const code =
      "return ['</script><script>alert(1)</SCRIPT>', `<!-- ${'</style>'} -->`, /<\\/script>|<!--/.test('<!--'), /<!--/u.test('a<!--'), '</Style>'].join('|'); // </script>";
    const safe = inlineText(code, 'js');
    assert.doesNotMatch(safe, /<\/(script|style)|<!--/i);
    // The point is to run both texts as the browser would: compiled from strings.
    /* eslint-disable @typescript-eslint/no-implied-eval */
    assert.equal(new Function(safe)(), new Function(code)());
    assert.equal(new Function(safe)(), '</script><script>alert(1)</SCRIPT>|<!-- </style> -->|true|true|</Style>');
    /* eslint-enable @typescript-eslint/no-implied-eval */
    assert.equal(inlineText('.a::after { content: "</style>"; }', 'css'), '.a::after { content: "\\3C /style>"; }');
  });
});
