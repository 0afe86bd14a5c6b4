/**
 * The record is exactly what went over the wire, except secrets (README "Privacy"): real `openai`
 * and `@anthropic-ai/sdk` agents under `lightning run`, against the scripted upstream. Both
 * directions: fields named `token`, `password`, `secret_word`, `cookie` (tool schemas, Anthropic
 * tool_use inputs) and logprobs' `token` strings survive byte for byte through proxy → store → show
 * → both exports; the agent's keys — its Authorization, an extra header (also in the body's
 * `extra_headers`), a key it typed into a reward comment, keys in JSON-string OTLP attributes, the
 * upstream echoing them — reach neither the store's files, nor the logs, nor the exports.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Json, Span } from '../../trainer-daemon/protocol';
import { runCli } from '../helpers/daemon';
import { AGENTS, ANTHROPIC_KEY, anthropicEnv, assertNotStored, type Obj } from '../helpers/providerAgents';
import { runAgent, type AgentRun } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';

/** The agent's own OpenAI key: no known shape, so only remembering what the agent sent can redact it. */
const AGENT_KEY = 'opaque-openai-credential-4711';
const EXTRA_HEADER = 'sk-proj-ExtraHeader0123456789abcdef';
const TYPED = 'ghp_TypedIntoAComment0123456789abcdefgh';
const OTLP_HEADER = 'opaque-otlp-credential-0815';
const HUMAN_TYPED = 'AIzaSyHumanTyped0123456789abcdefghijkl';
const SECRETS = [AGENT_KEY, EXTRA_HEADER, TYPED, OTLP_HEADER, ANTHROPIC_KEY, HUMAN_TYPED];

/** A chat completion with a tool call and logprobs whose token strings read like credential names. */
const FIELD_NAMES_ANSWER = JSON.stringify({
  id: 'chatcmpl-fields',
  object: 'chat.completion',
  created: 1,
  model: 'field-names',
  choices: [
    {
      index: 0,
      finish_reason: 'tool_calls',
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_login',
            type: 'function',
            function: { name: 'login', arguments: '{"token":"t-42","password":"pw"}' },
          },
        ],
      },
      logprobs: {
        content: [
          {
            token: 'token',
            logprob: -0.01,
            bytes: [116, 111, 107, 101, 110],
            top_logprobs: [{ token: 'token', logprob: -0.01, bytes: [116, 111, 107, 101, 110] }],
          },
          {
            token: ' password',
            logprob: -0.5,
            bytes: [32, 112, 97, 115, 115, 119, 111, 114, 100],
            top_logprobs: [{ token: ' secret', logprob: -1.2, bytes: [32, 115, 101, 99, 114, 101, 116] }],
          },
        ],
      },
    },
  ],
  usage: { prompt_tokens: 12, completion_tokens: 2, total_tokens: 14 },
});

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream({
    chat: (body) => {
      if (body.model === 'field-names') return { status: 200, body: FIELD_NAMES_ANSWER };
      // The upstream echoes what it was sent, as error messages and debugging gateways do.
      if (body.model === 'echo-keys') return `You used ${AGENT_KEY} with x-api-key ${EXTRA_HEADER}.`;
      return undefined;
    },
  });
});
after(() => upstream.close());

const llmByModel = (run: AgentRun, model: string): Span =>
  run.detail.spans.find((s) => s.category === 'llm' && (s.attributes['lightning.request'] as Obj).model === model)!;

async function exported(run: AgentRun, format: 'transitions' | 'chat'): Promise<{ text: string; rows: Obj[] }> {
  const out = path.join(run.cwd, `${format}.jsonl`);
  const result = await runCli(['export', '--format', format, '--out', out], { cwd: run.cwd });
  assert.equal(result.code, 0, result.stderr);
  const text = fs.readFileSync(out, 'utf8');
  return {
    text,
    rows: text
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Obj),
  };
}

describe('secrets are scrubbed by value, model content is never edited by field name', () => {
  test('openai + @anthropic-ai/sdk agent: fields named token/password survive everywhere; its keys are stored nowhere', async (t) => {
    const run = await runAgent(t, upstream.url, ['node', path.join(AGENTS, 'secrets-agent.mjs')], {
      ...anthropicEnv(upstream),
      OPENAI_API_KEY: AGENT_KEY,
      AGENT_EXTRA_HEADER: EXTRA_HEADER,
      AGENT_TYPED_KEY: TYPED,
      AGENT_OTLP_HEADER: OTLP_HEADER,
    });
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(
      run.stdout,
      /CALL: login\(\{"token":"t-42","password":"pw"\}\) ECHO: \d+ chars USE: \{"password":"correct horse battery staple","token":"the token the user typed"\} REWARD: 200 TRACES: 200/,
    );
    const sent = (model: string): Obj => upstream.requests.find((r) => r.body?.model === model)!.body as Obj;
    assert.equal(
      sent('field-names').extra_headers !== undefined &&
        upstream.requests.find((r) => r.body?.model === 'field-names')!.headers['x-api-key'],
      EXTRA_HEADER,
      'the agent’s headers went upstream unchanged',
    );

    // Exactly what went over the wire: the tool schema as sent, the answer as received.
    const fields = llmByModel(run, 'field-names');
    const request = fields.attributes['lightning.request'] as Obj;
    assert.equal(
      JSON.stringify(request.tools),
      JSON.stringify(sent('field-names').tools),
      'tool schema with token/password/secret_word/cookie properties, byte for byte',
    );
    assert.deepEqual(
      request.extra_headers,
      { 'x-api-key': '[redacted]', Authorization: '[redacted]' },
      'extra_headers in a body: the names stay, the values go',
    );
    assert.equal(
      JSON.stringify(fields.attributes['lightning.response']),
      JSON.stringify(JSON.parse(FIELD_NAMES_ANSWER)),
      'logprobs token strings byte for byte',
    );

    const anthropic = llmByModel(run, 'claude-credential-fields');
    const blocks = (anthropic.attributes['lightning.response'] as Obj).content as Obj[];
    assert.deepEqual(blocks[0]!.input, { password: 'correct horse battery staple', token: 'the token the user typed' });
    assert.deepEqual(((anthropic.attributes['lightning.request'] as Obj).tools as Obj[])[0]!.input_schema, {
      type: 'object',
      properties: { password: { type: 'string' }, token: { type: 'string' } },
    });

    const echo = llmByModel(run, 'echo-keys');
    assert.equal(
      (((echo.attributes['lightning.response'] as Obj).choices as Obj[])[0]!.message as Obj).content,
      'You used [redacted] with x-api-key [redacted].',
    );

    const otlp = run.detail.spans.find((s) => s.name === 'tool login')!;
    assert.deepEqual(JSON.parse(String(otlp.attributes['input.value'])), {
      api_key: '[redacted]',
      extra_headers: { 'x-api-key': '[redacted]' },
      typed: '[redacted]',
      schema: { token: { type: 'string' } },
    });
    assert.equal(otlp.attributes['http.request.header.authorization'], '[redacted]');
    assert.equal(
      otlp.attributes['output.value'],
      'logged in as [redacted]',
      'the header attribute’s value, wherever else the span has it',
    );
    assert.deepEqual(
      run.detail.rewards.map((r) => r.comment),
      ['worked with [redacted]; also tried [redacted]'],
    );

    // A person pastes a key into an annotation (the CLI, no daemon running: the key's shape gives it away).
    const annotated = await runCli(['reward', run.last.id, '0', '--comment', `leaked ${HUMAN_TYPED} oops`, '--json'], {
      cwd: run.cwd,
    });
    assert.equal(annotated.code, 0, annotated.stderr);
    assert.equal((JSON.parse(annotated.stdout) as { comment: string }).comment, 'leaked [redacted] oops');

    const shown = await runCli(['show', run.last.id], { cwd: run.cwd });
    assert.equal(shown.code, 0, shown.stderr);
    const shownJson = await runCli(['show', run.last.id, '--json'], { cwd: run.cwd });
    const transitions = await exported(run, 'transitions');
    const chat = await exported(run, 'chat');

    // Both exports carry the content untouched.
    const tools = (row: Obj): Json => ((row.prompt as Obj | undefined)?.tools ?? row.tools) as Json;
    for (const rows of [transitions.rows, chat.rows]) {
      assert.equal(rows.length, 3, 'three whole answers');
      const login = rows.find((row) => JSON.stringify(tools(row) ?? null).includes('session token'))!;
      assert.equal(JSON.stringify(tools(login)), JSON.stringify(sent('field-names').tools));
      const anthropicRow = rows.find((row) => JSON.stringify(row).includes('correct horse'))!;
      assert.match(
        JSON.stringify(anthropicRow),
        /"arguments":"\{\\"password\\":\\"correct horse battery staple\\",\\"token\\":\\"the token the user typed\\"\}"/,
      );
      assert.match(
        JSON.stringify(tools(anthropicRow)),
        /"properties":\{"password":\{"type":"string"\},"token":\{"type":"string"\}\}/,
      );
    }
    const loginTransition = transitions.rows.find((row) => (row.model as string) === 'field-names')!;
    assert.deepEqual(loginTransition.logprobs, [-0.01, -0.5]);
    assert.match(shownJson.stdout, /"token":"token","logprob":-0.01/);
    assert.match(shownJson.stdout, /"token":" password","logprob":-0.5/);

    // And not one of the keys anywhere: the store's files (database, WAL, logs), show, the exports, the run's output.
    for (const secret of SECRETS) {
      assertNotStored(run, secret);
      for (const [where, text] of [
        ['show', shown.stdout],
        ['show --json', shownJson.stdout],
        ['transitions', transitions.text],
        ['chat', chat.text],
        ['run output', run.stdout + run.stderr],
      ] as const) {
        assert.ok(!text.includes(secret), `${where} holds ${secret}`);
      }
    }
  });
});
