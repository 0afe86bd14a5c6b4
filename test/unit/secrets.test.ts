/**
 * Secrets are found by value (protocol/secrets.ts): known keys and key shapes go wherever they are;
 * model content — fields named `token` or `password`, tool schemas, logprobs — is never edited by name.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { PLACEHOLDER_API_KEY, type Json, type SpanInput } from '../../trainer-daemon/protocol';
import { RECORD_LIMITS, scrubJsonValues, scrubSpan } from '../../trainer-daemon/protocol/recordScrub';
import {
  registerSecretValue,
  rememberRolloutSecrets,
  requestSecretValues,
  scrubMessage,
  scrubText,
  secretsOf,
  urlSecretValues,
} from '../../trainer-daemon/protocol/secrets';
import { Store } from '../../trainer-daemon/store/store';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';

function llmSpan(attributes: Record<string, Json>): SpanInput {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    parentSpanId: null,
    name: 'chat m',
    kind: 'client',
    category: 'llm',
    startMs: 1,
    endMs: 2,
    statusCode: 'ok',
    statusMessage: null,
    attributes,
    events: [],
    promptTokens: null,
    completionTokens: null,
  };
}

describe('secrets by value', () => {
  test('key shapes are redacted; ordinary text that resembles them is not', () => {
    const keys = [
      'sk-proj-AbCdEf0123456789ghijklmnop',
      'sk-ant-api03-test-secret-0123456789',
      'AIzaSyTestSecret0123456789abcdefghijk',
      'ghp_abcdefghijklmnopqrstuvwxyz0123456789',
      'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz',
      'xoxb-1234567890-abcdefghij',
      'AKIAIOSFODNN7EXAMPLE',
      'hf_abcdefghijklmnopqrstuvwxyz012345',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
      'Bearer 0123456789abcdefghijklmn',
      'sk_live_0123456789abcdefABCD',
    ];
    for (const key of keys) assert.equal(scrubText(`use ${key} here`), 'use [redacted] here', key);
    const ordinary = [
      'The risk-assessment-framework-for-teams is ready.',
      'sk-learn-compatible-estimators',
      'Bearer authentication',
      'Bearer tokens are sent in the Authorization header',
      'AKIA is a prefix',
      'r/MachineLearning and /r/programming',
      'see https://example.com/search?q=token&page=2',
      'password',
      'token',
      ' secret',
      'eyJ',
      'xox',
    ];
    for (const text of ordinary) assert.equal(scrubText(text), text, text);
  });

  test('fields named token, password, secret, cookie are content: kept byte for byte; only values are redacted', () => {
    const request: Json = {
      model: 'm',
      tools: [
        {
          type: 'function',
          function: {
            name: 'login',
            parameters: {
              type: 'object',
              properties: {
                token: { type: 'string' },
                password: { type: 'string' },
                secret_word: { type: 'string' },
                cookie: { type: 'string' },
              },
            },
          },
        },
      ],
      messages: [{ role: 'user', content: 'my key is sk-proj-AbCdEf0123456789ghijklmnop' }],
      extra_headers: {
        'x-api-key': 'sk-proj-AbCdEf0123456789ghijklmnop',
        Authorization: 'Bearer 0123456789abcdefghijklmn',
      },
    };
    const response: Json = {
      content: [
        {
          type: 'tool_use',
          id: 'toolu_1',
          name: 'login',
          input: { password: 'hunter2', token: 'abc', api_key: 'not-a-key' },
        },
      ],
      choices: [
        {
          logprobs: {
            content: [
              { token: 'token', logprob: -0.1, bytes: [116], top_logprobs: [{ token: ' password', logprob: -2 }] },
            ],
          },
        },
      ],
    };
    const span = scrubSpan(llmSpan({ 'lightning.request': request, 'lightning.response': response }));
    const kept = span.attributes['lightning.request'] as {
      tools: Json;
      messages: Array<{ content: string }>;
      extra_headers: Json;
    };
    assert.deepEqual(kept.tools, (request as { tools: Json }).tools);
    assert.equal(kept.messages[0]!.content, 'my key is [redacted]');
    assert.deepEqual(
      kept.extra_headers,
      { 'x-api-key': '[redacted]', Authorization: '[redacted]' },
      'extra headers in a body: the names stay, the values go',
    );
    assert.equal(
      JSON.stringify(span.attributes['lightning.response']),
      JSON.stringify(response),
      'tool_use inputs and logprobs byte for byte',
    );
  });

  test('a rollout remembers its agent’s credentials; they are redacted in that rollout’s records only', () => {
    const agentKey = 'opaque-agent-credential-0042';
    const googleKey = 'opaque-google-key-0043';
    const values = requestSecretValues(
      {
        authorization: `Bearer ${agentKey}`,
        'x-goog-api-key': undefined,
        'content-type': 'application/json',
        'x-stainless-retry-count': '0',
      },
      `?alt=sse&key=${googleKey}`,
    );
    assert.deepEqual(values.sort(), [`Bearer ${agentKey}`, agentKey, googleKey].sort());
    assert.deepEqual(
      requestSecretValues({ authorization: `Bearer ${PLACEHOLDER_API_KEY}`, 'x-api-key': PLACEHOLDER_API_KEY }),
      [],
      'the placeholder is no secret',
    );
    const basic = requestSecretValues({ authorization: `Basic ${btoa('user:basic-password-9')}` });
    assert.ok(basic.includes('basic-password-9'));
    assert.ok(requestSecretValues({ cookie: 'a=1; session=session-value-77' }).includes('session-value-77'));
    assert.deepEqual(urlSecretValues('https://user:url-password-55@gw.example.com/v1?api_key=url-query-key-66'), [
      'url-password-55',
      'url-query-key-66',
    ]);
    assert.deepEqual(
      urlSecretValues('https://gateway-key-1234@gw.example.com/v1'),
      ['gateway-key-1234'],
      'a key given as the user name',
    );

    rememberRolloutSecrets('ro_one', values);
    const echo = llmSpan({
      'lightning.response': { error: { message: `Incorrect API key provided: ${agentKey}` } },
      'gen_ai.prompt': `{"key":"${googleKey}"}`,
    });
    const scrubbed = scrubSpan(
      { ...echo, statusMessage: `upstream HTTP 401: Incorrect API key provided: ${agentKey}` },
      'ro_one',
    );
    assert.ok(
      !JSON.stringify(scrubbed).includes(agentKey) && !JSON.stringify(scrubbed).includes(googleKey),
      JSON.stringify(scrubbed),
    );
    assert.equal(
      (scrubbed.attributes['lightning.response'] as { error: { message: string } }).error.message,
      'Incorrect API key provided: [redacted]',
    );
    assert.equal(scrubbed.attributes['gen_ai.prompt'], '{"key":"[redacted]"}', 'inside a JSON-string attribute too');
    assert.equal(
      scrubSpan(echo, 'ro_other').attributes['gen_ai.prompt'],
      `{"key":"${googleKey}"}`,
      'another rollout did not send it: it is just text there',
    );
    assert.ok(secretsOf('ro_one').includes(agentKey));
  });

  test('a span’s own header attributes are redacted whole, and their values wherever else the span has them', () => {
    const cookie = 'sid=cookie-session-0099';
    const span = scrubSpan(
      llmSpan({ 'http.request.header.cookie': [cookie], note: 'sent cookie-session-0099 back' }),
      'ro_two',
    );
    assert.deepEqual(span.attributes['http.request.header.cookie'], ['[redacted]']);
    assert.equal(span.attributes.note, 'sent [redacted] back');
    assert.ok(secretsOf('ro_two').includes('cookie-session-0099'), 'remembered for the rollout');
  });

  test('the daemon’s own keys go everywhere; messages of our own also lose header-quoted values', () => {
    registerSecretValue('daemon-upstream-key-xyz');
    assert.equal(scrubText('echo daemon-upstream-key-xyz'), 'echo [redacted]');
    assert.equal(
      scrubMessage('denied x-api-key: plainvalue123 at https://h/p?key=abcdef123'),
      'denied x-api-key: [redacted] at https://h/p?key=[redacted]',
    );
    const row = {
      messages: [
        { role: 'user', content: 'token' },
        { role: 'assistant', content: 'daemon-upstream-key-xyz' },
      ],
    };
    assert.deepEqual(scrubJsonValues(row), {
      messages: [
        { role: 'user', content: 'token' },
        { role: 'assistant', content: '[redacted]' },
      ],
    });
    const clean = { a: ['token', { password: 'p' }] };
    assert.equal(scrubJsonValues(clean), clean, 'nothing to redact: the same object');
  });

  test('truncation bookkeeping: a span cut at the string limit is marked truncated, and still scrubbed', () => {
    const span = scrubSpan(
      llmSpan({
        'lightning.request': {
          messages: [
            { role: 'user', content: `sk-proj-AbCdEf0123456789ghijklmnop ${'a'.repeat(RECORD_LIMITS.maxStringChars)}` },
          ],
        },
      }),
    );
    const content = JSON.stringify(span.attributes['lightning.request']);
    assert.ok(content.startsWith('{"messages":[{"role":"user","content":"[redacted] aaa'));
    assert.match(content, /truncated \d+ characters/);
    assert.equal(span.attributes['lightning.outcome'], 'truncated');
    assert.equal(span.attributes['lightning.truncated_by'], 'string_chars');
  });

  test('a secret across a cut is redacted whole, never kept in part: the string limit, the record budget, a status message', () => {
    const known = 'known-secret-value-0123456789-abcdefghijklmnopqrstuvwxyz';
    const shaped = 'sk-proj-AbCdEf0123456789ghijklmnopQRSTUVwxyz0123';
    rememberRolloutSecrets('r-cut', [known]);
    const max = RECORD_LIMITS.maxStringChars;
    // Each secret starts 10 characters before the cut: its first 10 characters would be kept.
    for (const secret of [known, shaped]) {
      const text = `${'a'.repeat(max - 11)} ${secret} and more`;
      const span = scrubSpan(llmSpan({ 'lightning.request': { content: text } }), 'r-cut');
      const content = (span.attributes['lightning.request'] as { content: string }).content;
      assert.ok(!content.includes(secret.slice(0, 10)), `no part of ${secret.slice(0, 8)}… is kept`);
      assert.match(content, /a \[redacted\]…\[lightning: truncated \d+ characters\]$/);
      assert.equal(span.attributes['lightning.truncated_by'], 'string_chars');
    }
    // A string far past the cut (the scrubbed window is cut too): no part of the secret, no end of the window.
    const long = `${'a'.repeat(max - 11)} ${known} ${'z'.repeat(40_000)}`;
    const far = scrubSpan(llmSpan({ 'lightning.request': { content: long } }), 'r-cut');
    const farContent = (far.attributes['lightning.request'] as { content: string }).content;
    assert.ok(!farContent.includes(known.slice(0, 10)) && !farContent.includes('z'));
    assert.match(farContent, /^a+ ?(\[redacted\])?…\[lightning: truncated \d+ characters\]$/);
    // The record budget runs out inside a secret: 8 strings of 1 MiB minus 20 characters, then the secret.
    const filler = 'b'.repeat(max - 20);
    const parts: Json[] = [...Array.from({ length: 8 }, () => filler), `${'c'.repeat(100)}${known}`];
    const cut = scrubSpan(llmSpan({ 'lightning.request': parts }), 'r-cut');
    assert.ok(!JSON.stringify(cut.attributes).includes(known.slice(0, 10)), 'no part of the secret past the budget');
    assert.equal(cut.attributes['lightning.truncated_by'], 'record_chars');
    // A status message cut at its 64 KiB.
    const message = `${'m'.repeat(64 * 1024 - 10)}${known}`;
    const failed = scrubSpan({ ...llmSpan({}), statusCode: 'error', statusMessage: message }, 'r-cut');
    assert.ok(!failed.statusMessage!.includes(known.slice(0, 10)));
    assert.match(failed.statusMessage!, /\[redacted\]…\[lightning: truncated/);
  });

  test('the store: a rollout’s spans, rewards and error are scrubbed with its own remembered secrets; the file never holds them', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    const store = Store.open(file);
    t.after(() => store.close());
    const rollout = store.createRollout(parsed('createRollout', { label: 'secrets' }));
    store.transitionRollout(parsed('transitionRollout', { id: rollout.id, to: 'running' }));
    const secret = 'opaque-store-credential-31337';
    rememberRolloutSecrets(rollout.id, requestSecretValues({ 'x-api-key': secret }));
    store.addSpans({
      rolloutId: rollout.id,
      spans: [
        llmSpan({
          'lightning.request': {
            tools: [{ name: 'f', input_schema: { properties: { token: {} } } }],
            messages: [{ role: 'user', content: `key ${secret}` }],
          },
        }),
      ],
    });
    const reward = store.addReward(
      parsed('addReward', {
        rolloutId: rollout.id,
        value: 1,
        comment: `thanks, ${secret}`,
        reason: `judge saw ${secret}`,
      }),
    );
    assert.deepEqual([reward.comment, reward.reason], ['thanks, [redacted]', 'judge saw [redacted]']);
    store.addRewards([parsed('addReward', { rolloutId: rollout.id, value: 0.5, name: 'auto', comment: secret })]);
    const ended = store.transitionRollout(
      parsed('transitionRollout', { id: rollout.id, to: 'failed', error: `agent crashed: bad key ${secret}` }),
    );
    assert.equal(ended.error, 'agent crashed: bad key [redacted]');
    const [span] = store.getRolloutDetail(rollout.id).spans;
    assert.deepEqual(span!.attributes['lightning.request'], {
      tools: [{ name: 'f', input_schema: { properties: { token: {} } } }],
      messages: [{ role: 'user', content: 'key [redacted]' }],
    });
    store.close();
    for (const name of fs.readdirSync(path.dirname(file)))
      assert.ok(!fs.readFileSync(path.join(path.dirname(file), name)).includes(secret), name);
  });
});
