// `npm run screenshots`: the Marketplace page's and the walkthrough's pictures (media/marketplace.md,
// media/walkthrough/*.md), copied from what the e2e suite photographed in the installed VSIX in the current
// VS Code (test/e2e/showcase.test.ts, into test-results/e2e/) into media/screenshots/, where they are committed.
// Run that e2e file first: `node test/run.mjs test/e2e/showcase.test.ts`.
// Usage: node .ci/screenshots.mjs
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const from = path.join(root, 'test-results', 'e2e');
const to = path.join(root, 'media', 'screenshots');

/** The e2e's picture → its name in media/screenshots/ (the links in the Markdown use these). */
export const PICTURES = {
  'marketing-panel.png': 'panel.png',
  'marketing-rollout.png': 'trajectory.png',
  'marketing-compare.png': 'compare.png',
  'marketing-training.png': 'training.png',
  'marketing-walkthrough-panel.png': 'walkthrough-panel.png',
  'marketing-walkthrough-rollout.png': 'walkthrough-rollout.png',
  'marketing-walkthrough-training.png': 'walkthrough-training.png',
};

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  const missing = Object.keys(PICTURES).filter((name) => !fs.existsSync(path.join(from, name)));
  if (missing.length > 0) {
    console.error(
      `screenshots: ${missing.join(', ')} not in ${path.relative(root, from)}/. Take them first: node test/run.mjs test/e2e/showcase.test.ts`,
    );
    process.exit(1);
  }
  fs.mkdirSync(to, { recursive: true });
  for (const [name, target] of Object.entries(PICTURES)) {
    fs.copyFileSync(path.join(from, name), path.join(to, target));
    const kib = (fs.statSync(path.join(to, target)).size / 1024).toFixed(0);
    console.log(`media/screenshots/${target} ← test-results/e2e/${name} (${kib} KiB)`);
  }
}
