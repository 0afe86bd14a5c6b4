#!/usr/bin/env node
'use strict';
const path = require('node:path');
const fs = require('node:fs');

const bundle = path.join(__dirname, '..', 'dist', 'cli.js');
if (!fs.existsSync(bundle)) {
  process.stderr.write(`lightning: ${bundle} is missing; run \`npm run build\` first\n`);
  process.exit(1);
}
require(bundle);
