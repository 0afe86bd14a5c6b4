// needs: node24, unzip
// `npm run package` (package.mjs): one .vsix per target, each holding exactly its platform's native
// binaries (checked by name and by the binaries' own headers: ELF machine, Mach-O CPU type) and no
// file of another platform; and the linux-x64 one, unpacked outside the checkout, scores rollouts
// with a TypeScript reward function and an ONNX reward model on a Node with node:sqlite
// (LIGHTNING_NODE24, else this Node when it has one). Needs `unzip` and `npm run build` (pretest).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import { ScoreRolloutsResult } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { recordRollout } from '../helpers/rewards';
import { tempDir } from '../helpers/tmp';

const root = path.join(__dirname, '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  version: string;
  repository: { url: string };
};
const version = manifest.version;
const ORT = 'extension/dist/node_modules/onnxruntime-node/bin/napi-v6';
const ESBUILD = 'extension/dist/node_modules/@esbuild';

/** Each target's native files, and what its binaries must be built for. */
const EXPECTED: Record<string, { files: string[]; format: 'elf' | 'macho'; cpu: 'x64' | 'arm64' }> = {
  'linux-x64': {
    files: [
      `${ESBUILD}/linux-x64/bin/esbuild`,
      `${ORT}/linux/x64/libonnxruntime.so.1`,
      `${ORT}/linux/x64/onnxruntime_binding.node`,
    ],
    format: 'elf',
    cpu: 'x64',
  },
  'linux-arm64': {
    files: [
      `${ESBUILD}/linux-arm64/bin/esbuild`,
      `${ORT}/linux/arm64/libonnxruntime.so.1`,
      `${ORT}/linux/arm64/onnxruntime_binding.node`,
    ],
    format: 'elf',
    cpu: 'arm64',
  },
  'darwin-arm64': {
    files: [
      `${ESBUILD}/darwin-arm64/bin/esbuild`,
      `${ORT}/darwin/arm64/libonnxruntime.1.dylib`,
      `${ORT}/darwin/arm64/onnxruntime_binding.node`,
    ],
    format: 'macho',
    cpu: 'arm64',
  },
  // onnxruntime-node ships no darwin-x64 binary: only esbuild's.
  'darwin-x64': { files: [`${ESBUILD}/darwin-x64/bin/esbuild`], format: 'macho', cpu: 'x64' },
};

/** The platform a binary is for, from its header; null for a file that is no ELF, Mach-O or PE binary. */
function binaryKind(bytes: Buffer): string | null {
  if (bytes.length < 20) return null;
  if (bytes.readUInt32BE(0) === 0x7f454c46)
    return `elf-${({ 0x3e: 'x64', 0xb7: 'arm64' } as Record<number, string>)[bytes.readUInt16LE(18)] ?? 'other'}`;
  if (bytes.readUInt32LE(0) === 0xfeedfacf)
    return `macho-${({ 0x01000007: 'x64', 0x0100000c: 'arm64' } as Record<number, string>)[bytes.readUInt32LE(4)] ?? 'other'}`;
  if (bytes.readUInt32BE(0) === 0xcafebabe) return 'macho-universal';
  if (bytes.readUInt16BE(0) === 0x4d5a) return 'pe';
  return null;
}

const entries = (vsix: string): string[] =>
  execFileSync('unzip', ['-Z1', vsix], { encoding: 'utf8', maxBuffer: 16 << 20 })
    .split('\n')
    .filter((line) => line && !line.endsWith('/'));
const head = (vsix: string, entry: string): Buffer =>
  execFileSync('unzip', ['-p', vsix, entry], { maxBuffer: 256 << 20 }).subarray(0, 64);

let out: string;
before(() => {
  out = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), 'lightning-package-'));
  const run = spawnSync(process.execPath, [path.join(root, '.ci', 'package.mjs')], {
    env: { ...process.env, LIGHTNING_PACKAGE_OUT: out },
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, run.stderr);
  // One line per target with its size.
  for (const target of Object.keys(EXPECTED))
    assert.match(run.stdout, new RegExp(`lightning-${target}-${version}\\.vsix  \\d+\\.\\d MB`));
});

describe('npm run package', () => {
  for (const [target, expected] of Object.entries(EXPECTED)) {
    test(`the ${target} VSIX holds exactly its platform's binaries and no file of another platform`, () => {
      const vsix = path.join(out, `lightning-${target}-${version}.vsix`);
      const files = entries(vsix);
      const native = files.filter(
        (file) => /\.(node|so(\.\d+)*|dylib|dll|exe)$/.test(file) || /\/bin\/esbuild$/.test(file),
      );
      assert.deepEqual(native.sort(), [...expected.files].sort());
      for (const file of native)
        assert.equal(
          binaryKind(head(vsix, file)),
          `${expected.format}-${expected.cpu}`,
          `${file} is not a ${target} binary`,
        );
      const others = Object.keys(EXPECTED)
        .filter((other) => other !== target)
        .flatMap((other) => [`@esbuild/${other}/`, `napi-v6/${other.replace('-', '/')}/`]);
      assert.deepEqual(
        files.filter((file) => others.some((mark) => file.includes(mark)) || /win32|better[-_]sqlite3/.test(file)),
        [],
      );
      // What the runtime needs from the extension: bundles, the CLI, the preloads Debug with Lightning and `lightning
      // run` pass (a `--require` file missing would crash every Node debuggee), the sample agent, the trainer worker,
      // the walkthrough.
      for (const file of [
        'extension/dist/cli.js',
        'extension/dist/cli-main.js',
        'extension/dist/extension.js',
        'extension/dist/exit-code.js',
        'extension/dist/capture-preload.js',
        'extension/trainer-daemon/python/lightning_capture/sitecustomize.py',
        'extension/dist/demo-agent.mjs',
        'extension/dist/codicon.ttf',
        'extension/dist/node_modules/esbuild/lib/main.js',
        'extension/dist/node_modules/onnxruntime-common/dist/cjs/index.js',
        'extension/media/icon.png',
        'extension/media/walkthrough/demo.md',
        'extension/LICENSE.txt',
        'extension/trainer-daemon/python/lightning_trainer/__init__.py',
      ]) {
        assert.ok(files.includes(file), `${target} lacks ${file}`);
      }
      assert.match(
        execFileSync('unzip', ['-p', vsix, 'extension.vsixmanifest'], { encoding: 'utf8' }),
        new RegExp(`TargetPlatform="${target}"`),
      );
      assert.deepEqual(
        files.filter((file) => /\.map$|\.d\.ts$|__pycache__/.test(file)),
        [],
      );
      // The page a user installs from: the user's README, its images inside the VSIX, links not rewritten.
      // extension/readme.md: vsce's name for it.
      const readme = execFileSync('unzip', ['-p', vsix, 'extension/readme.md'], { encoding: 'utf8' });
      assert.equal(readme, fs.readFileSync(path.join(root, 'media', 'marketplace.md'), 'utf8'));
      const images = [...readme.matchAll(/!\[[^\]]*\]\(([^)]+)\)/g)].map((match) => match[1]!);
      assert.ok(images.length >= 3, 'the README shows the loop in pictures');
      for (const image of images) assert.ok(files.includes(`extension/${image}`), `${image} is not inside the VSIX`);
      assert.doesNotMatch(readme, /npm (ci|test)/, 'no developer commands');
      assert.ok(
        images.every((image) => !/^[a-z]+:/i.test(image)),
        `images are files of the VSIX, not URLs: ${images.join(', ')}`,
      );
      // "Learn more" links the repository's documentation: each link to the repository names a file it has.
      const repository = manifest.repository.url.replace(/\.git$/, '');
      const links = [...readme.matchAll(/\]\((https?:[^)]+)\)/g)].map((match) => match[1]!);
      assert.ok(
        links.some((link) => link.includes('/docs/')),
        'the README links the documentation',
      );
      for (const link of links) {
        assert.ok(link.startsWith(repository), `${link} is the repository's`);
        const file = /\/blob\/main\/(.+)$/.exec(link)?.[1];
        if (file) assert.ok(fs.existsSync(path.join(root, file)), `${link}: ${file} exists in the repository`);
      }
      assert.deepEqual(
        files.filter((file) => /^extension\/media\/(README|marketplace)\.md$/.test(file)),
        [],
      );
    });
  }

  test('the linux-x64 VSIX, unpacked outside the checkout, scores with a TypeScript reward function and an ONNX model (or names the Node it needs)', (t) => {
    const dir = tempDir(t);
    execFileSync('unzip', [
      '-q',
      path.join(out, `lightning-linux-x64-${version}.vsix`),
      '-d',
      path.join(dir, 'installed'),
    ]);
    const cli = path.join(dir, 'installed', 'extension', 'dist', 'cli.js');
    const fixtures = path.join(root, 'test', 'fixtures');
    const work = path.join(dir, 'work');
    for (const file of ['matches.ts', 'helper.ts'])
      fs.cpSync(path.join(fixtures, 'rewards', 'functions', file), path.join(work, file));
    for (const file of ['model.onnx', 'tokenizer.json'])
      fs.cpSync(path.join(fixtures, 'reward-model', file), path.join(work, file));
    const storeFile = path.join(work, '.lightning', 'store.db');
    const store = Store.open(storeFile);
    recordRollout(store, { answer: 'PARIS', task: { input: { question: 'capital?', expected: 'PARIS' } } });
    store.close();
    fs.writeFileSync(
      path.join(work, '.lightning', 'rewards.json'),
      JSON.stringify({
        default: {
          sources: [
            { type: 'function', module: '../matches.ts' },
            { type: 'model', path: '../model.onnx', template: '{answer}' },
          ],
        },
      }),
    );

    const node = process.env.LIGHTNING_NODE24 ?? process.execPath;
    const run = spawnSync(node, [cli, 'score', '--store', storeFile, '--json'], {
      cwd: work,
      encoding: 'utf8',
      env: { PATH: '/usr/bin:/bin', HOME: dir },
    });
    const nodeVersion = execFileSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
    const [major, minor] = nodeVersion.split('.').map(Number) as [number, number];
    if (!(major > 22 || (major === 22 && minor >= 13))) {
      // The .vsix carries no better-sqlite3: on an older Node it says what to run instead.
      assert.notEqual(run.status, 0);
      assert.match(
        run.stderr,
        /has no node:sqlite and better-sqlite3 is not installed beside Lightning.*Node ≥ 22\.13/,
      );
      return;
    }
    assert.equal(run.status, 0, run.stderr);
    const result = ScoreRolloutsResult.parse(JSON.parse(run.stdout));
    const sources = result.results[0]!.sources;
    assert.deepEqual(
      sources.map((s) => [s.kind, s.kind === 'scored' ? Math.round(s.value * 1e4) / 1e4 : null]),
      [
        ['scored', 1],
        ['scored', 0.7807],
      ],
    );
  });
});
