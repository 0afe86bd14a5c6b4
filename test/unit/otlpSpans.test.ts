// What each span of an OTLP export becomes (otlp.test.ts covers the decoding itself): its category and tokens by
// semantic convention, its rollout, a malformed span refused alone, secrets removed by value.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Attributes } from '@opentelemetry/api';
import { detectResources, envDetector } from '@opentelemetry/resources';
import Long from 'long';
import { isCredentialKey } from '../../trainer-daemon/otlp/normalize';
import { encode, oneSpan, recordSpans } from '../helpers/otlp';
import { editedBodies, ingest } from '../helpers/otlpIngest';
import path from 'node:path';
import { Store } from '../../trainer-daemon/store/store';
import { parsed } from '../helpers/params';
import { llmSpan } from '../helpers/spans';
import { tempDir } from '../helpers/tmp';

describe('OTLP spans: what each span becomes', () => {
  const conventions: Array<
    [
      convention: string,
      name: string,
      attributes: Attributes,
      category: string,
      prompt: number | null,
      completion: number | null,
    ]
  > = [
    [
      'GenAI chat',
      'chat gpt-4o',
      {
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': 'gpt-4o',
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.usage.output_tokens': 7,
      },
      'llm',
      12,
      7,
    ],
    [
      'GenAI embeddings',
      'embeddings',
      { 'gen_ai.operation.name': 'embeddings', 'gen_ai.usage.input_tokens': 3 },
      'other',
      null,
      null,
    ],
    ['GenAI text_completion', 'complete', { 'gen_ai.operation.name': 'text_completion' }, 'llm', null, null],
    ['GenAI generate_content', 'gemini', { 'gen_ai.operation.name': 'generate_content' }, 'llm', null, null],
    [
      'GenAI execute_tool',
      'execute_tool search',
      { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.system': 'openai' },
      'tool',
      null,
      null,
    ],
    [
      'GenAI invoke_agent (usage not double counted)',
      'invoke_agent triage',
      { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.usage.input_tokens': 100 },
      'agent',
      null,
      null,
    ],
    ['GenAI create_agent', 'create_agent', { 'gen_ai.operation.name': 'create_agent' }, 'agent', null, null],
    [
      'GenAI older usage names',
      'openai.chat',
      { 'gen_ai.system': 'openai', 'gen_ai.usage.prompt_tokens': 30, 'gen_ai.usage.completion_tokens': 4 },
      'llm',
      30,
      4,
    ],
    ['GenAI request model only', 'call', { 'gen_ai.request.model': 'llama3' }, 'llm', null, null],
    [
      'GenAI flattened messages',
      'call',
      { 'gen_ai.prompt.0.role': 'user', 'gen_ai.completion.0.content': 'hello' },
      'llm',
      null,
      null,
    ],
    [
      'OpenInference LLM',
      'ChatOpenAI',
      { 'openinference.span.kind': 'LLM', 'llm.token_count.prompt': 21, 'llm.token_count.completion': 9 },
      'llm',
      21,
      9,
    ],
    ['OpenInference EMBEDDING', 'embed', { 'openinference.span.kind': 'EMBEDDING' }, 'other', null, null],
    [
      'OpenInference TOOL',
      'search',
      { 'openinference.span.kind': 'TOOL', 'llm.token_count.prompt': 5 },
      'tool',
      null,
      null,
    ],
    ['OpenInference AGENT', 'agent', { 'openinference.span.kind': 'AGENT' }, 'agent', null, null],
    ['OpenInference CHAIN', 'RunnableSequence', { 'openinference.span.kind': 'CHAIN' }, 'agent', null, null],
    ['OpenInference RETRIEVER', 'retrieve', { 'openinference.span.kind': 'RETRIEVER' }, 'other', null, null],
    [
      'Vercel doGenerate',
      'ai.generateText.doGenerate',
      { 'ai.operationId': 'ai.generateText.doGenerate', 'ai.usage.promptTokens': 40, 'ai.usage.completionTokens': 8 },
      'llm',
      40,
      8,
    ],
    [
      'Vercel doStream (v5 usage names)',
      'ai.streamText.doStream',
      { 'ai.operationId': 'ai.streamText.doStream', 'ai.usage.inputTokens': 41, 'ai.usage.outputTokens': 2 },
      'llm',
      41,
      2,
    ],
    ['Vercel generateObject', 'ai.generateObject.doGenerate', {}, 'llm', null, null],
    [
      'Vercel toolCall',
      'ai.toolCall',
      { 'ai.operationId': 'ai.toolCall', 'ai.toolCall.name': 'weather' },
      'tool',
      null,
      null,
    ],
    [
      'Vercel outer generateText',
      'ai.generateText',
      { 'ai.operationId': 'ai.generateText', 'ai.usage.promptTokens': 81 },
      'agent',
      null,
      null,
    ],
    ['Vercel outer streamText', 'ai.streamText', {}, 'agent', null, null],
    ['Agent Lightning reward by name', 'agentlightning.reward', { reward: 1 }, 'reward', null, null],
    [
      'Agent Lightning reward by attribute',
      'grade',
      { 'agentlightning.reward.value': 0.5, 'gen_ai.system': 'x' },
      'reward',
      null,
      null,
    ],
    ['nothing recognizable', 'db.query', { 'db.system': 'postgresql' }, 'other', null, null],
  ];
  for (const [convention, name, attributes, category, prompt, completion] of conventions) {
    test(`classifies ${convention} as ${category} with tokens ${prompt}/${completion}`, () => {
      const { span } = ingest(encode(oneSpan(name, attributes), 'protobuf'), 'protobuf').spans[0]!;
      assert.deepEqual([span.category, span.promptTokens, span.completionTokens], [category, prompt, completion]);
    });
  }

  test('rollout id: resource attribute from OTEL_RESOURCE_ATTRIBUTES, else the span attribute, else null', () => {
    const saved = process.env.OTEL_RESOURCE_ATTRIBUTES;
    process.env.OTEL_RESOURCE_ATTRIBUTES = 'service.name=agent,lightning.rollout_id=ro-42';
    let resource;
    try {
      resource = detectResources({ detectors: [envDetector] });
    } finally {
      if (saved === undefined) delete process.env.OTEL_RESOURCE_ATTRIBUTES;
      else process.env.OTEL_RESOURCE_ATTRIBUTES = saved;
    }
    const fromResource = recordSpans(
      (tracer) => tracer.startSpan('s', { attributes: { 'lightning.rollout_id': 'ro-span' } }).end(),
      resource,
    );
    assert.deepEqual(
      ingest(encode(fromResource, 'json'), 'json').spans.map((s) => s.rolloutId),
      ['ro-42'],
    );
    const fromSpan = oneSpan('s', { 'lightning.rollout_id': 'ro-7' });
    assert.deepEqual(
      ingest(encode(fromSpan, 'protobuf'), 'protobuf').spans.map((s) => s.rolloutId),
      ['ro-7'],
    );
    assert.deepEqual(
      ingest(encode(oneSpan('s', {}), 'protobuf'), 'protobuf').spans.map((s) => s.rolloutId),
      [null],
    );
  });

  test('partial success: malformed spans are rejected by id and reason, the rest of the batch goes through', () => {
    const spans = recordSpans((tracer) => {
      for (const name of ['good', 'bad id', 'no start', 'wrong type'])
        tracer.startSpan(name, { attributes: { api_key: 'sk-leak-0123456789abcdefghij' } }).end();
    });
    const ids = spans.map((s) => s.spanContext().spanId);
    const bodies = editedBodies(spans, (request, encoding) => {
      const [, badId, noStart, wrongType] = request.resourceSpans[0]!.scopeSpans[0]!.spans;
      badId!.traceId = encoding === 'protobuf' ? Uint8Array.from([1, 2, 3]) : '010203';
      noStart!.startTimeUnixNano = encoding === 'protobuf' ? Long.UZERO : '0';
      if (encoding === 'json') wrongType!.name = 42;
      else wrongType!.name = '';
    });
    const fromProtobuf = ingest(bodies.protobuf, 'protobuf');
    const fromJson = ingest(bodies.json, 'json');
    for (const result of [fromProtobuf, fromJson]) {
      assert.deepEqual(
        result.spans.map((s) => s.span.spanId),
        [ids[0]],
      );
      assert.doesNotMatch(JSON.stringify(result), /sk-leak/);
    }
    assert.deepEqual(fromProtobuf.rejected, [
      { spanId: ids[1], error: 'traceId must be 16 bytes (32 hex characters), not all zero' },
      { spanId: ids[2], error: 'startTimeUnixNano is missing' },
      { spanId: ids[3], error: 'name is missing' },
    ]);
    assert.deepEqual(fromJson.rejected, [
      { spanId: ids[3], error: 'span[3].name: Invalid input: expected string, received number' },
      { spanId: ids[1], error: 'traceId must be 16 bytes (32 hex characters), not all zero' },
      { spanId: ids[2], error: 'startTimeUnixNano is missing' },
    ]);
  });

  test('secrets are redacted by value: header attributes whole, their values and key shapes anywhere; fields named token or password are content', () => {
    const agentKey = 'plain-agent-credential-4711';
    const schema = JSON.stringify({
      type: 'object',
      properties: { token: { type: 'string' }, password: { type: 'string' }, api_key: { type: 'string' } },
    });
    const spans = recordSpans((tracer) => {
      const span = tracer.startSpan('chat', {
        attributes: {
          'gen_ai.operation.name': 'chat',
          'gen_ai.usage.input_tokens': 5,
          'gen_ai.request.max_tokens': 64,
          'llm.token_count.prompt': 5,
          'ai.usage.promptTokens': 5,
          'http.request.header.authorization': `Bearer ${agentKey}`,
          'x-api-key': 'sk-2',
          Cookie: 'session=abc',
          apiKey: 'sk-proj-AbCdEf0123456789ghijkl',
          'url.full':
            'https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=opaque-google-key-1&alt=sse',
          'llm.tools.0.tool.json_schema': schema,
          token: 'Paris',
          password: 'the word the user chose',
          'llm.input_messages.0.message.content': `my key is ${agentKey}, and the other one opaque-google-key-1`,
        },
      });
      span.addEvent('request', {
        'http.request.header.set-cookie': 'sid=sess-value-0123',
        size: 10,
        echo: 'cookie sess-value-0123',
      });
      span.end();
    });
    // Redacted where the store takes a span, whoever made it (ingest applies it).
    const { span } = ingest(encode(spans, 'protobuf'), 'protobuf').spans[0]!;
    assert.deepEqual(span.attributes, {
      'gen_ai.operation.name': 'chat',
      'gen_ai.usage.input_tokens': 5,
      'gen_ai.request.max_tokens': 64,
      'llm.token_count.prompt': 5,
      'ai.usage.promptTokens': 5,
      'http.request.header.authorization': '[redacted]',
      'x-api-key': '[redacted]',
      Cookie: '[redacted]',
      apiKey: '[redacted]',
      'url.full': 'https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=[redacted]&alt=sse',
      'llm.tools.0.tool.json_schema': schema,
      token: 'Paris',
      password: 'the word the user chose',
      'llm.input_messages.0.message.content': 'my key is [redacted], and the other one [redacted]',
    });
    assert.deepEqual(span.events[0]!.attributes, {
      'http.request.header.set-cookie': '[redacted]',
      size: 10,
      echo: 'cookie [redacted]',
    });
    assert.equal(span.promptTokens, 5);
    for (const key of ['token', 'access_token', 'x-auth-token', 'sessionToken', 'private_key', 'Proxy-Authorization'])
      assert.ok(isCredentialKey(key), key);
    for (const key of ['prompt_token_ids', 'tokenizer', 'gen_ai.usage.output_tokens', 'llm.token_count.total'])
      assert.ok(!isCredentialKey(key), key);
  });
});

describe('OpenInference LLM spans and the proxy’s record of the same call', () => {
  test('the response id in output.value ties the span to the record: one step, its tokens counted once', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    const { id } = store.createRollout(parsed('createRollout', {}));
    const recorded = llmSpan({
      attributes: { 'lightning.api': 'chat.completions', 'gen_ai.response.id': 'chatcmpl-abc' },
      promptTokens: 20,
      completionTokens: 5,
    });
    store.addSpans({ rolloutId: id, spans: [recorded] });
    const { span } = ingest(
      encode(
        oneSpan('ChatCompletion', {
          'openinference.span.kind': 'LLM',
          'llm.model_name': 'gpt-4o',
          'output.mime_type': 'application/json',
          'output.value': JSON.stringify({ id: 'chatcmpl-abc', object: 'chat.completion', choices: [] }),
          'llm.token_count.prompt': 20,
          'llm.token_count.completion': 5,
        }),
        'protobuf',
      ),
      'protobuf',
    ).spans[0]!;
    assert.equal(span.attributes['gen_ai.response.id'], 'chatcmpl-abc', 'read from the answer it keeps');
    // The OTLP span's clock encloses the record's, as the instrumentation wraps the call.
    store.addSpans({
      rolloutId: id,
      spans: [{ ...span, traceId: recorded.traceId, startMs: recorded.startMs - 5, endMs: recorded.endMs! + 5 }],
    });
    const detail = store.getRolloutDetail(id);
    assert.deepEqual(
      detail.spans.map((s) => [s.category, s.attributes['lightning.same_call_as'] ?? null]),
      [
        ['llm', null],
        ['other', recorded.spanId],
      ],
    );
    assert.deepEqual([detail.rollout.llmCalls, detail.rollout.promptTokens], [1, 20]);
    const plain = ingest(
      encode(oneSpan('llm', { 'openinference.span.kind': 'LLM', 'output.value': 'hello' }), 'json'),
      'json',
    );
    assert.equal(plain.spans[0]!.span.attributes['gen_ai.response.id'], undefined, 'text output: no id');
  });
});
