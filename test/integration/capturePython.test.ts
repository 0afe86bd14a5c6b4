// needs: venv
/**
 * A Python agent whose provider URLs are written into its code (no base-URL variable read) is captured unchanged
 * through `lightning run`: the capture `sitecustomize` (trainer-daemon/python/lightning_capture), first on the
 * agent's PYTHONPATH, routes its `httpx` (the openai SDK, sync and async, streaming) and `requests` calls to the
 * providers' hosts through the rollout URL; the sitecustomize it shadows still runs.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { REPO_ROOT } from '../helpers/daemon';
import { AGENTS, ANTHROPIC_KEY, assertNotStored, llmOf, python } from '../helpers/providerAgents';
import { runAgent } from '../helpers/runAgent';
import { ANSWER, startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { PROVIDER_ANSWER } from '../helpers/scriptedProviders';
import { tempDir } from '../helpers/tmp';

const SITE = path.join(REPO_ROOT, 'trainer-daemon', 'python', 'lightning_capture');
const OPENAI_KEY = 'sk-proj-hardcodedAgentKey0123456789';

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

describe('Python agents with a provider URL in their code, unchanged, through lightning run', () => {
  test('openai (httpx, sync and async streaming) and requests to the providers are recorded', async (t) => {
    const seen = upstream.requests.length;
    const env = {
      MY_OPENAI_KEY: OPENAI_KEY,
      OPENAI_API_KEY: '',
      ANTHROPIC_API_KEY: ANTHROPIC_KEY,
      LIGHTNING_ANTHROPIC_UPSTREAM_URL: upstream.origin,
    };
    const run = await runAgent(t, upstream.url, [python(), path.join(AGENTS, 'hardcoded_base_agent.py')], env);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.ok(run.stdout.includes(`ANSWERS: ${ANSWER} | ${ANSWER} | ${PROVIDER_ANSWER}`), run.stdout);
    const llm = llmOf(run);
    assert.deepEqual(
      llm.map((span) => [span.attributes['lightning.api'], span.attributes['lightning.streamed']]),
      [
        ['chat.completions', false],
        ['chat.completions', true],
        ['anthropic.messages', false],
      ],
    );
    const calls = upstream.requests.slice(seen);
    assert.deepEqual(
      calls.map((r) => r.path),
      ['/v1/chat/completions', '/v1/chat/completions', '/v1/messages'],
    );
    assert.deepEqual(
      calls.map((r) => r.headers.authorization ?? r.headers['x-api-key']),
      [`Bearer ${OPENAI_KEY}`, `Bearer ${OPENAI_KEY}`, ANTHROPIC_KEY],
      'the keys go as the agent sent them',
    );
    assertNotStored(run, OPENAI_KEY);
    assertNotStored(run, ANTHROPIC_KEY);
  });

  test('only the providers’ served paths are rerouted, and the sitecustomize it shadows still runs', (t) => {
    const dir = tempDir(t);
    fs.writeFileSync(path.join(dir, 'sitecustomize.py'), 'import builtins\nbuiltins.SHADOWED_RAN = True\n');
    const script = [
      'import builtins, sitecustomize as s',
      'u = "http://127.0.0.1:9/r/k"',
      'print(getattr(builtins, "SHADOWED_RAN", False))',
      'print(s.rerouted_url("https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?alt=sse", u))',
      'for url in ["https://api.openai.com/v1/files", "https://example.com/v1/chat/completions", "http://api.openai.com/v1/chat/completions", "https://api.anthropic.com:444/v1/messages"]: print(s.rerouted_url(url, u))',
    ].join('\n');
    const out = execFileSync(python(), ['-c', script], {
      env: { ...process.env, PYTHONPATH: `${SITE}:${dir}`, LIGHTNING_URL: 'http://127.0.0.1:9/r/k' },
      encoding: 'utf8',
    });
    assert.deepEqual(out.trim().split('\n'), [
      'True',
      'http://127.0.0.1:9/r/k/v1beta/models/g:generateContent?alt=sse',
      'None',
      'None',
      'None',
      'None',
    ]);
  });
});
