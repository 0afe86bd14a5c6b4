// `npm run package`: one .vsix per platform (`vsce package --target T`), each carrying only that
// platform's native parts, so the installed extension needs nothing but VS Code:
// * onnxruntime-node's N-API binary (ONNX reward models): its package holds every platform's;
//   the target's bin/napi-v6/<platform>/<arch> only (none exists for darwin-x64, see TARGETS).
// * esbuild's platform package @esbuild/<target> (TypeScript reward functions), fetched with
//   `npm pack` (the registry; cached in dist/vsix/cache), and esbuild's JS API.
// No SQLite module: the daemon runs on the editor's own Node and uses node:sqlite.
// Each target is staged in dist/vsix/<target>/ (the manifest, dist/ bundles, media, the trainer
// worker, and these modules under dist/node_modules, where dist/cli.js resolves them first) and
// packed there with the stage's .vscodeignore (this repository's). Prints each VSIX and its size.
// Usage: node .ci/package.mjs [TARGET…]   (default: every target; run `npm run build` first)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));

/** VS Code target → onnxruntime-node's bin folder (null: it ships none) and esbuild's platform package. */
export const TARGETS = {
  'linux-x64': { onnx: 'linux/x64', esbuild: '@esbuild/linux-x64' },
  'linux-arm64': { onnx: 'linux/arm64', esbuild: '@esbuild/linux-arm64' },
  'darwin-arm64': { onnx: 'darwin/arm64', esbuild: '@esbuild/darwin-arm64' },
  'darwin-x64': { onnx: null, esbuild: '@esbuild/darwin-x64' },
};

/**
 * Where the stages and VSIX files go (LIGHTNING_PACKAGE_OUT, e.g. a test's temporary folder); the npm pack cache stays
 * in build/.
 */
const out = process.env.LIGHTNING_PACKAGE_OUT
  ? path.resolve(process.env.LIGHTNING_PACKAGE_OUT)
  : path.join(root, 'dist', 'vsix');
const cache = path.join(root, 'dist', 'vsix', 'cache');

/** Copies a file or folder, leaving out Python caches and (in packages) type declarations and source maps. */
function copy(from, to) {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.cpSync(from, to, {
    recursive: true,
    filter: (src) => !src.includes('__pycache__') && !(src.includes('node_modules') && /\.(d\.ts|map)$/.test(src)),
  });
}

/** A package from node_modules, only the listed paths inside it. */
function copyPackage(name, stage, paths) {
  const from = path.join(root, 'node_modules', name);
  for (const entry of paths) copy(path.join(from, entry), path.join(stage, 'dist', 'node_modules', name, entry));
}

/** `npm pack NAME@VERSION` once into the cache, unpacked: the folder holding its package.json. */
function fetchPackage(name, version) {
  const dir = path.join(cache, `${name.replace('/', '+')}@${version}`);
  if (fs.existsSync(path.join(dir, 'package', 'package.json'))) return path.join(dir, 'package');
  fs.mkdirSync(dir, { recursive: true });
  const tarball = execFileSync('npm', ['pack', `${name}@${version}`, '--silent', '--pack-destination', dir], {
    encoding: 'utf8',
  })
    .trim()
    .split('\n')
    .pop();
  execFileSync('tar', ['xzf', path.join(dir, tarball), '-C', dir]);
  return path.join(dir, 'package');
}

/**
 * The ONNX runtime's native folder for one platform: the binding and only the libraries it loads (the names in its
 * load commands: `libonnxruntime.so.1`, `@rpath/libonnxruntime.1.dylib`). The npm package also carries a second,
 * versioned copy of the macOS library (44.6 MB) that nothing loads.
 */
function onnxFiles(onnx) {
  const dir = path.join(root, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', onnx);
  const binding = fs.readFileSync(path.join(dir, 'onnxruntime_binding.node')).toString('latin1');
  return fs
    .readdirSync(dir)
    .filter(
      (file) =>
        file === 'onnxruntime_binding.node' || binding.includes(`/${file}\0`) || binding.includes(`\0${file}\0`),
    )
    .map((file) => `bin/napi-v6/${onnx}/${file}`);
}

function stageTarget(target) {
  const { onnx, esbuild } = TARGETS[target];
  const stage = path.join(out, target);
  fs.rmSync(stage, { recursive: true, force: true });
  fs.mkdirSync(stage, { recursive: true });
  // The manifest without what only a checkout uses: vsce packs the stage as it is (--no-dependencies).
  const {
    dependencies: _d,
    optionalDependencies: _od,
    devDependencies: _dd,
    scripts: _s,
    allowScripts: _a,
    ...shipped
  } = manifest;
  fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify(shipped, null, 2)}\n`);
  // The marketplace page is the user's README (media/marketplace.md), not the repository's developer README.
  copy(path.join(root, 'media', 'marketplace.md'), path.join(stage, 'README.md'));
  for (const file of [
    'LICENSE',
    'CHANGELOG.md',
    '.vscodeignore',
    'media',
    'bin',
    'trainer-daemon/python/lightning_trainer',
    'trainer-daemon/python/lightning_capture',
  ])
    copy(path.join(root, file), path.join(stage, file));
  for (const file of ['README.md', 'marketplace.md']) fs.rmSync(path.join(stage, 'media', file));
  for (const file of fs.readdirSync(path.join(root, 'dist'))) {
    if (/\.(m?js|css|ttf)$/.test(file)) copy(path.join(root, 'dist', file), path.join(stage, 'dist', file));
  }
  copyPackage('onnxruntime-common', stage, ['package.json', 'dist/cjs']);
  copyPackage('onnxruntime-node', stage, ['package.json', 'dist', ...(onnx ? onnxFiles(onnx) : [])]);
  copyPackage('esbuild', stage, ['package.json', 'lib']);
  const esbuildVersion = JSON.parse(
    fs.readFileSync(path.join(root, 'node_modules', 'esbuild', 'package.json'), 'utf8'),
  ).version;
  const platformPackage = fetchPackage(esbuild, esbuildVersion);
  for (const entry of ['package.json', 'bin'])
    copy(path.join(platformPackage, entry), path.join(stage, 'dist', 'node_modules', esbuild, entry));
  return stage;
}

function packageTarget(target) {
  const stage = stageTarget(target);
  const vsix = path.join(out, `${manifest.name}-${target}-${manifest.version}.vsix`);
  fs.rmSync(vsix, { force: true });
  const vsce = path.join(root, 'node_modules', '@vscode', 'vsce', 'vsce');
  // Its images are files inside the VSIX (media/screenshots/): relative links resolve there, in the editor's
  // extension page, instead of being rewritten to a repository URL that must be public to resolve.
  execFileSync(
    process.execPath,
    [vsce, 'package', '--target', target, '--no-dependencies', '--no-rewrite-relative-links', '--out', vsix],
    { cwd: stage, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  return vsix;
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === path.join(root, '.ci', 'package.mjs');
if (isMain) {
  if (!fs.existsSync(path.join(root, 'dist', 'cli.js'))) {
    console.error('package: dist/ has no build; run `npm run build` first (npm run package does)');
    process.exit(1);
  }
  const targets = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(TARGETS);
  for (const target of targets) {
    if (!(target in TARGETS)) {
      console.error(`package: unknown target ${target}; use one of ${Object.keys(TARGETS).join(', ')}`);
      process.exit(1);
    }
    const vsix = packageTarget(target);
    console.log(`${path.relative(root, vsix)}  ${(fs.statSync(vsix).size / 1024 / 1024).toFixed(1)} MB`);
  }
}
