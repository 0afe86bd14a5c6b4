/**
 * The world of the e2e editor suite (test/e2e/editor.test.ts): the scripted model's answers, an agent that crashes,
 * spans like the proxy records.
 */
import fs from 'node:fs';
import path from 'node:path';
import { CRITIQUE_SYSTEM, EDIT_SYSTEM } from '../../trainer-daemon/apo/prompts';
import type { SpanInput } from '../../trainer-daemon/protocol';
import { script as apoScript } from './apo';
import type { ChatScript } from './scriptedUpstream';
import { llmSpan } from './spans';

/** An LLM call span like the proxy records, with a short conversation (the `index`th of a rollout's). */
export function panelLlmSpan(index: number): SpanInput {
  const start = Date.now() - 60_000 + index * 10;
  return llmSpan({
    traceId: 'e'.repeat(32),
    spanId: index.toString(16).padStart(16, '0'),
    name: 'chat test-model',
    startMs: start,
    endMs: start + 8,
    attributes: {
      'gen_ai.request.model': 'test-model',
      'lightning.request': {
        model: 'test-model',
        messages: [{ role: 'user', content: `Question ${index}: what is ${index} + 1?` }],
      },
      'lightning.response': { choices: [{ message: { role: 'assistant', content: String(index + 1) } }] },
    },
    promptTokens: 12,
    completionTokens: 2,
  });
}

/**
 * The scripted upstream's answers: the sums world of the APO tests (an answer that depends on the
 * prompt, critiques and edits) for the Sum agent and the optimizer; the default (weather) otherwise.
 */
const sums = apoScript();
export const sumsOrDefault: ChatScript = (body) => {
  const content = (body.messages as Array<{ content?: unknown }> | undefined)?.[0]?.content;
  const first = typeof content === 'string' ? content : '';
  return first === CRITIQUE_SYSTEM || first === EDIT_SYSTEM || first.startsWith('Add the numbers')
    ? sums.chat(body)
    : undefined;
};

/** The fields of `lightning resource get --json` that the test compares (version, current, value). */
export const resourceFields = ({
  resource,
}: {
  resource: { version: number; current: boolean; value: string };
}): unknown => ({
  version: resource.version,
  current: resource.current,
  value: resource.value,
});

/** A key the crashing agent prints (and the launch configuration sets): it never reaches the store. */
export const CRASH_KEY = 'sk-crash-7f3a9c2e4b6d8f10';

/**
 * A Node agent on the real `openai` SDK that makes one LLM call, prints, then throws (uncaught): its launch
 * configuration, "Crashing agent", is added to the workspace's.
 */
export async function addCrashingAgent(workspace: string): Promise<void> {
  fs.writeFileSync(
    path.join(workspace, 'crash-agent.mjs'),
    `import OpenAI from 'openai';
const client = new OpenAI({ maxRetries: 0 });
const reply = await client.chat.completions.create({
  model: 'test-model',
  messages: [{ role: 'user', content: 'What is the weather in Oslo?' }],
});
console.log('asked the model: ' + reply.choices[0].message.content);
console.error('using key ' + process.env.CRASH_KEY);
throw new Error('no forecast for Oslo');
`,
  );
  const file = path.join(workspace, '.vscode', 'launch.json');
  const launch = JSON.parse(fs.readFileSync(file, 'utf8')) as { configurations: unknown[] };
  launch.configurations.push({
    type: 'node',
    request: 'launch',
    name: 'Crashing agent',
    program: '${workspaceFolder}/crash-agent.mjs',
    console: 'internalConsole',
    env: { OPENAI_API_KEY: CRASH_KEY, CRASH_KEY },
  });
  fs.writeFileSync(file, JSON.stringify(launch, null, 2));
}
