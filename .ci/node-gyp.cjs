#!/usr/bin/env node
// npm runs this as node-gyp (the project's .npmrc names it) when a dependency compiles a native module
// (better-sqlite3). node-gyp needs the running Node's headers: without a configured `nodedir` it downloads them,
// which fails on machines without internet even when the headers are installed beside Node (Debian's and the
// official tarball's layout: <prefix>/include/node). This finds them there and passes --nodedir; anything else
// — a configured nodedir, no local headers, a version mismatch — leaves node-gyp to do what it always does.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

function npmNodeGyp() {
  // npm sets npm_execpath to its own npm-cli.js; its node-gyp sits in npm's node_modules.
  const candidates = [];
  if (process.env.npm_execpath) candidates.push(path.join(path.dirname(process.env.npm_execpath), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  candidates.push(path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  const found = candidates.find((file) => fs.existsSync(file));
  if (!found) {
    console.error('lightning: cannot find npm\'s node-gyp (looked in ' + candidates.join(', ') + ')');
    process.exit(1);
  }
  return found;
}

function localHeaders() {
  if (process.env.npm_config_nodedir || process.argv.some((arg) => arg.startsWith('--nodedir'))) return undefined;
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  const header = path.join(prefix, 'include', 'node', 'node_version.h');
  if (!fs.existsSync(header)) return undefined;
  const text = fs.readFileSync(header, 'utf8');
  const part = (name) => (new RegExp(`#define ${name} (\\d+)`).exec(text) || [])[1];
  const version = `${part('NODE_MAJOR_VERSION')}.${part('NODE_MINOR_VERSION')}.${part('NODE_PATCH_VERSION')}`;
  return version === process.versions.node ? prefix : undefined;
}

const args = process.argv.slice(2);
const nodedir = localHeaders();
process.argv = [process.argv[0], npmNodeGyp(), ...args, ...(nodedir && ['rebuild', 'configure', 'install'].includes(args[0]) ? [`--nodedir=${nodedir}`] : [])];
require(process.argv[1]);
