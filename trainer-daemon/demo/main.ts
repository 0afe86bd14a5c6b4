/**
 * `npm run demo`: the embedded default, offline — no API key, no GPU, nothing downloaded.
 * It starts the demo model server, runs the sample agent (the real `openai` SDK) once per built-in
 * task with `lightning run`, which records every LLM call through the daemon's proxy and the
 * agent's rewards into `.lightning/store.db`, then annotates one rollout as a human would and
 * prints what was recorded. Training on these rollouts is not part of Lightning yet.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { openBackend } from '../cli/backend';
import { num, table } from '../cli/format';
import { Daemon, upstreamFromEnv } from '../daemon';
import { findDaemon } from '../discovery';
import { createLogger } from '../log';
import { DEMO_MODEL_ID, startDemoModel } from './model';

const TASKS = [
  { id: 'add-1', question: 'What is 23 plus 45?', answer: 68 },
  { id: 'sub-1', question: 'What is 23 minus 45?', answer: -22 },
  { id: 'mul-1', question: 'What is 12 times 11?', answer: 132 },
  { id: 'add-2', question: 'What is 706 plus 94?', answer: 800 },
  { id: 'sub-2', question: 'What is 1000 minus 1?', answer: 999 },
  { id: 'mul-2', question: 'What is 25 times 25?', answer: 625 },
];

/** The checkout (dist/ and trainer-daemon/ live under it): both bundles sit in dist/. */
const root = path.resolve(__dirname, '..');
const cli = path.join(root, 'dist', 'cli.js');
const agent = path.join(root, 'trainer-daemon', 'demo', 'sample-agent.mjs');
const store = path.resolve('.lightning', 'store.db');

function say(text: string): void {
  process.stdout.write(`${text}\n`);
}

function run(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], { env, stdio: ['ignore', 'inherit', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

export async function runDemo(): Promise<void> {
  say('Lightning demo: record a tool-using agent, offline.');
  say(`  store        ${store}`);
  const model = await startDemoModel();
  say(`  model        ${DEMO_MODEL_ID} at ${model.url} (a rule-based stand-in, no weights: no API key or download needed)`);
  say(`  agent        node ${path.relative(process.cwd(), agent)} (the real openai SDK; unchanged code)`);
  // One daemon for the whole demo: the one that owns the store, or one in this process.
  const daemon = findDaemon(store)
    ? undefined
    : await Daemon.start({ storeFile: store, host: '127.0.0.1', port: 0, logger: createLogger('daemon', { level: 'warn' }), upstream: upstreamFromEnv({}, model.url) });
  say(`  daemon       ${daemon ? `${daemon.url} (started for the demo; \`npx lightning serve\` runs one on its own)` : 'the running daemon that owns the store'}`);
  say('');
  // The agent must use the demo model, whatever the user's shell points OpenAI programs at.
  const env = { ...process.env, OPENAI_BASE_URL: '', OPENAI_API_BASE: '', OPENAI_API_KEY: '' };
  const ids: string[] = [];
  try {
    for (const task of TASKS) {
      const result = await run(
        ['run', '--store', store, '--label', 'demo', '--task-id', task.id, '--task', JSON.stringify(task), '--upstream', model.url, '--', process.execPath, agent],
        env,
      );
      const finished = result.stderr.trim().split('\n').at(-1) ?? '';
      if (result.code !== 0 || !finished.includes('rollout-finished')) throw new Error(`the sample agent failed on ${task.id}:\n${result.stderr}`);
      ids.push((JSON.parse(finished) as { id: string }).id);
    }
    // Annotate as a reviewer in the panel would: a human reward with a comment on the first rollout.
    await run(['reward', '--store', store, ids[0]!, '1', '--comment', 'checked by hand in the demo'], env);
    const backend = await openBackend(store);
    try {
      const page = await backend.call('listRollouts', { limit: TASKS.length });
      say('');
      say(table(['ROLLOUT', 'TASK', 'STATUS', 'LLM CALLS', 'TOKENS', 'REWARD'], page.items.map((r) => [r.id, r.task?.id ?? '-', r.status, String(r.llmCalls), String(r.promptTokens + r.completionTokens), num(r.reward)])));
      say('');
      const calls = page.items.reduce((sum, r) => sum + r.llmCalls, 0);
      say(`Recorded ${ids.length} rollouts (${calls} LLM calls with their tool calls, and the agent's rewards) in ${path.relative(process.cwd(), store)}.`);
    } finally {
      backend.close();
    }
  } finally {
    await daemon?.stop();
    await model.close();
  }
  say('Look at them:');
  say('  npx lightning rollouts');
  say(`  npx lightning show ${ids[0]}`);
  say('Annotate one:  npx lightning reward <id> 0 --comment "wrong tool"');
  say('Training data:  npx lightning export --out transitions.jsonl   (LightningRL transitions with rewards and advantages)');
}


