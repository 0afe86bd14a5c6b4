import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  legacyFunctionsToTools,
  legacyReplyToToolCalls,
  noSkippedCalls,
  responsesItemsToChat,
  responsesRequestToChat,
  responsesResponseToChat,
  TrainingChatReader,
  type ExportReport,
  type Json,
} from '../../trainer-daemon/protocol';
import { leftOutLines } from '../../trainer-daemon/cli/commands/export';
import { StreamReassembler } from '../../trainer-daemon/capture/reassemble';

type Obj = { [key: string]: Json };

const weatherTool = {
  type: 'function',
  name: 'get_weather',
  description: 'weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
  strict: true,
};

describe('the Responses API as chat completions', () => {
  it('a request: instructions, message parts, developer as system, reasoning, parallel calls and their outputs, function tools only', () => {
    const form = responsesRequestToChat({
      model: 'gpt-x',
      instructions: 'Answer with the tool.',
      tools: [weatherTool, { type: 'web_search' }],
      input: [
        { role: 'developer', content: 'Be brief.' },
        {
          type: 'message',
          role: 'user',
          content: [
            { type: 'input_text', text: 'Paris and Oslo?' },
            { type: 'input_image', image_url: 'https://x/y.png', detail: 'low' },
          ],
        },
        {
          type: 'reasoning',
          id: 'rs_1',
          summary: [{ type: 'summary_text', text: 'Two cities: two calls.' }],
          encrypted_content: 'opaque',
        },
        {
          type: 'function_call',
          id: 'fc_1',
          call_id: 'call_a',
          name: 'get_weather',
          arguments: '{"city":"Paris"}',
          status: 'completed',
        },
        {
          type: 'function_call',
          id: 'fc_2',
          call_id: 'call_b',
          name: 'get_weather',
          arguments: '{"city":"Oslo"}',
          status: 'completed',
        },
        { type: 'function_call_output', call_id: 'call_a', output: 'sunny' },
        { type: 'function_call_output', call_id: 'call_b', output: [{ type: 'input_text', text: 'rain' }] },
        {
          type: 'message',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'Sunny and rainy.', annotations: [] }],
        },
        { role: 'user', content: 'Thanks' },
      ],
    });
    assert.equal(form.issue, undefined);
    assert.deepEqual(form.chat, {
      model: 'gpt-x',
      messages: [
        { role: 'system', content: 'Answer with the tool.' },
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Paris and Oslo?' },
            { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'low' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          reasoning_content: 'Two cities: two calls.',
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a', content: 'sunny' },
        { role: 'tool', tool_call_id: 'call_b', content: 'rain' },
        { role: 'assistant', content: 'Sunny and rainy.' },
        { role: 'user', content: 'Thanks' },
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'get_weather', description: 'weather', parameters: weatherTool.parameters, strict: true },
        },
      ],
    });
    assert.deepEqual(responsesRequestToChat({ model: 'm', input: 'Hi' }).chat, {
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
    });
  });

  it('an assistant message followed by its calls is one turn; a message after the calls is the next', () => {
    const form = responsesItemsToChat([
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Let me check.' }] },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'message', role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] },
    ]);
    assert.deepEqual(form.chat, [
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'assistant', content: '', refusal: 'No.' },
    ]);
  });

  it('a response: reasoning as reasoning_content, text, calls as tool_calls, finish reasons, usage', () => {
    const text = responsesResponseToChat({
      id: 'resp_1',
      model: 'gpt-x',
      status: 'completed',
      usage: { input_tokens: 12, output_tokens: 7 },
      output: [
        { type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'Easy.' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Sunny.' }] },
      ],
    });
    assert.deepEqual(text.chat, {
      id: 'resp_1',
      object: 'chat.completion',
      model: 'gpt-x',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Sunny.', reasoning_content: 'Easy.' },
          finish_reason: 'stop',
        },
      ],
      usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
    });
    const calls = responsesResponseToChat({
      id: 'r',
      status: 'completed',
      output: [{ type: 'function_call', id: 'fc', call_id: 'call_1', name: 'f', arguments: '{"a":1}' }],
    });
    assert.deepEqual((calls.chat!.choices as Obj[])[0], {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
      },
      finish_reason: 'tool_calls',
    });
    const cut = responsesResponseToChat({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output: [{ type: 'message', content: [{ type: 'output_text', text: 'Sun' }] }],
    });
    assert.equal((cut.chat!.choices as Obj[])[0]!.finish_reason, 'length');
    // Reasoning between a message and the calls after it, and after them: all of it is the answer's.
    const interleaved = responsesResponseToChat({
      status: 'completed',
      output: [
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'First.' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Let me look.' }] },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Second.' }] },
        { type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{}' },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Third.' }] },
      ],
    });
    assert.deepEqual((interleaved.chat!.choices as Obj[])[0]!.message, {
      role: 'assistant',
      content: 'Let me look.',
      reasoning_content: 'First.\nSecond.\nThird.',
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }],
    });
  });

  it('what has no chat form says why', () => {
    assert.match(responsesResponseToChat({ status: 'incomplete', output: [] }).issue!, /no output items/);
    assert.match(
      responsesResponseToChat({ output: [{ type: 'web_search_call', id: 'ws', status: 'completed' }] }).issue!,
      /`web_search_call` item has no chat form \(hosted/,
    );
    assert.match(
      responsesRequestToChat({ input: [{ type: 'item_reference', id: 'msg_1' }] }).issue!,
      /`item_reference`/,
    );
    assert.match(
      responsesRequestToChat({ input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }] })
        .issue!,
      /file id/,
    );
    assert.match(responsesRequestToChat({ conversation: 'conv_1', input: 'Hi' }).issue!, /stored conversation/);
    assert.match(
      responsesRequestToChat({ previous_response_id: 'resp_gone', input: 'Hi' }).issue!,
      /previous_response_id resp_gone is no earlier call/,
    );
  });

  it("previous_response_id continues the conversation of the rollout's earlier call, without its instructions", () => {
    const reader = new TrainingChatReader();
    const call = (request: Obj, response: Obj): Obj => ({
      'lightning.api': 'responses',
      'lightning.request': request,
      'lightning.response': response,
    });
    const first = reader.read(
      call(
        { model: 'm', instructions: 'First rules.', tools: [weatherTool], input: 'Weather in Paris?' },
        {
          id: 'resp_1',
          status: 'completed',
          output: [{ type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
        },
      ),
    );
    assert.equal(first.issue, null);
    const second = reader.read(
      call(
        {
          model: 'm',
          instructions: 'Second rules.',
          previous_response_id: 'resp_1',
          input: [{ type: 'function_call_output', call_id: 'call_1', output: 'sunny' }],
        },
        {
          id: 'resp_2',
          status: 'completed',
          output: [{ type: 'message', content: [{ type: 'output_text', text: 'Sunny.' }] }],
        },
      ),
    );
    assert.deepEqual(second.request!.messages, [
      { role: 'system', content: 'Second rules.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ]);
    assert.deepEqual([second.choices, second.issue], [1, null]);
  });
});

describe("chat completions' legacy functions as tools", () => {
  const functions = [{ name: 'get_weather', parameters: { type: 'object' } }];
  it('functions as tools, function_call as tool_calls, function results as tool messages, with ids stable across calls', () => {
    const first = { model: 'm', functions, function_call: 'auto', messages: [{ role: 'user', content: 'Paris?' }] };
    const reply = legacyReplyToToolCalls(
      {
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: null,
              function_call: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
            finish_reason: 'function_call',
          },
        ],
      },
      1,
    );
    assert.deepEqual((reply.choices as Obj[])[0], {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      finish_reason: 'tool_calls',
    });
    assert.deepEqual(legacyFunctionsToTools(first), {
      model: 'm',
      messages: first.messages,
      tools: [{ type: 'function', function: functions[0]! }],
      tool_choice: 'auto',
    });
    const second = legacyFunctionsToTools({
      model: 'm',
      functions,
      function_call: { name: 'get_weather' },
      messages: [
        { role: 'user', content: 'Paris?' },
        { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        { role: 'function', name: 'get_weather', content: 'sunny' },
      ],
    });
    assert.deepEqual(second.messages, [
      { role: 'user', content: 'Paris?' },
      { role: 'assistant', content: null, tool_calls: ((reply.choices as Obj[])[0]!.message as Obj).tool_calls },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ]);
    assert.deepEqual(second.tool_choice, { type: 'function', function: { name: 'get_weather' } });
    const plain = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    assert.equal(legacyFunctionsToTools(plain), plain, 'a request without legacy fields is unchanged');
  });

  it('the reader: legacy calls as tools, n > 1 counted, legacy /completions with its reason', () => {
    const reader = new TrainingChatReader();
    const legacy = reader.read({
      'lightning.api': 'chat.completions',
      'lightning.request': { model: 'm', n: 2, functions, messages: [{ role: 'user', content: 'Paris?' }] },
      'lightning.response': {
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{}' } },
          },
          { index: 1, message: { role: 'assistant', content: 'Sunny.' } },
        ],
      },
    });
    assert.deepEqual([legacy.choices, legacy.issue, (legacy.request!.tools as Obj[]).length], [2, null, 1]);
    assert.deepEqual((((legacy.response!.choices as Obj[])[0]!.message as Obj).tool_calls as Obj[])[0]!.id, 'call_1');
    const completions = reader.read({
      'lightning.api': 'completions',
      'lightning.request': { model: 'm', prompt: '2+2=' },
      'lightning.response': { choices: [{ index: 0, text: ' 4' }] },
    });
    assert.match(completions.issue!, /legacy \/completions call/);
  });
});

describe('what the export says it left out', () => {
  const report = (over: Partial<ExportReport>): ExportReport => ({
    rollouts: 1,
    exported: 1,
    transitions: 1,
    excludedNoReward: 0,
    filledNoReward: 0,
    excludedBelowMinReward: 0,
    excludedNoCalls: 0,
    skipped: noSkippedCalls(),
    otherChoices: 0,
    singletonGroups: 0,
    zeroVarianceGroups: 0,
    aggregated: null,
    ...over,
  });
  it('calls without a chat row by why, other choices, and why a file is empty', () => {
    assert.deepEqual(leftOutLines(report({ otherChoices: 1 }), {}, 1), [
      '1 other choice of n > 1 answers left out: one row per call, of its first choice',
    ]);
    assert.deepEqual(
      leftOutLines(report({}), { 'a legacy /completions call: a text prompt, not chat messages': 2 }, 0),
      [
        'no chat row for 2 calls (a legacy /completions call: a text prompt, not chat messages)',
        'no rows written: no call has a chat form (see above)',
      ],
    );
    assert.deepEqual(leftOutLines(report({ rollouts: 0, exported: 0, transitions: 0 }), {}, 0), [
      'no rows written: no rollout matches the filters (--status, --mode, --label, --dataset, --batch)',
    ]);
    assert.deepEqual(leftOutLines(report({ exported: 0, excludedNoReward: 2 }), {}, 0), [
      'no rows written: 2 rollouts without an episode reward (--missing-reward fill exports them)',
    ]);
    assert.deepEqual(leftOutLines(report({ filledNoReward: 1 }), {}, 2), [
      '1 rollout without an episode reward exported with the --missing-reward fill value',
    ]);
    assert.deepEqual(leftOutLines(report({}), {}, 3), []);
  });
});

describe('a streamed legacy function_call, reassembled for the record', () => {
  it('its name and argument pieces join into the message, the finish reason kept', () => {
    const stream = new StreamReassembler('chat.completions');
    const chunk = (delta: Obj, finish: string | null = null): void =>
      stream.add({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
    chunk({ role: 'assistant', content: null });
    chunk({ function_call: { name: 'get_weather', arguments: '' } });
    chunk({ function_call: { arguments: '{"city":' } });
    chunk({ function_call: { arguments: '"Paris"}' } });
    chunk({}, 'function_call');
    assert.deepEqual((stream.result().choices as Obj[])[0], {
      index: 0,
      finish_reason: 'function_call',
      message: {
        role: 'assistant',
        content: null,
        function_call: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      },
    });
  });
});

describe('streamed tool calls, reassembled for the record as the SDK read them', () => {
  const reassembled = (pieces: Obj[]): Obj => {
    const stream = new StreamReassembler('chat.completions');
    for (const call of pieces)
      stream.add({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { tool_calls: [call] } }] });
    return ((stream.result().choices as Obj[])[0]!.message as { tool_calls: Obj[] }).tool_calls[0]!;
  };

  it('a name repeated in every chunk (some servers do) is the name once; a later empty id keeps the call’s', () => {
    const call = reassembled([
      { index: 0, id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '' } },
      { index: 0, id: '', function: { name: 'read_file', arguments: '{"path":' } },
      { index: 0, function: { name: 'read_file', arguments: '"a"}' } },
    ]);
    assert.deepEqual(call, {
      id: 'call_1',
      type: 'function',
      function: { name: 'read_file', arguments: '{"path":"a"}' },
    });
  });

  it('a name split across chunks is joined; a name resent growing is the last', () => {
    const split = reassembled([
      { index: 0, id: 'call_1', type: 'function', function: { name: 'get_', arguments: '' } },
      { index: 0, function: { name: 'weather', arguments: '{}' } },
    ]);
    assert.equal((split.function as Obj).name, 'get_weather');
    const growing = reassembled([
      { index: 0, id: 'call_1', type: 'function', function: { name: 'get', arguments: '' } },
      { index: 0, function: { name: 'get_weather', arguments: '{}' } },
    ]);
    assert.equal((growing.function as Obj).name, 'get_weather');
  });
});

describe('Anthropic calls with no faithful chat form: a reason, not invented text', () => {
  const read = (request: Obj): string | null =>
    new TrainingChatReader().read({
      'lightning.api': 'anthropic.messages',
      'lightning.request': request,
      'lightning.response': { type: 'message', role: 'assistant', content: [{ type: 'text', text: '"Bob"}' }] },
    }).issue;

  it('an image in a tool result, a document block, an assistant prefill', () => {
    const toolUse = { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'shot', input: {} }] };
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo' } };
    assert.match(
      read({
        messages: [
          { role: 'user', content: 'Take a screenshot' },
          toolUse,
          {
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'here' }, image] }],
          },
        ],
      })!,
      /tool result with image content has no chat form/,
    );
    assert.match(
      read({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'document', source: { type: 'text', data: 'x' } },
              { type: 'text', text: 'Sum up' },
            ],
          },
        ],
      })!,
      /document block has no chat form/,
    );
    assert.match(
      read({
        messages: [
          { role: 'user', content: 'Give JSON' },
          { role: 'assistant', content: '{"name":' },
        ],
      })!,
      /assistant prefill/,
    );
  });

  it('text, images in user turns and text tool results keep their chat form', () => {
    assert.equal(
      read({
        system: 'Be brief.',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
            ],
          },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'look', input: {} }] },
          {
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'a cat' }] }],
          },
        ],
      }),
      null,
    );
  });
});

describe('a streamed answer’s reasoning and citations, reassembled as the non-streaming answer holds them', () => {
  const reassembled = (deltas: Obj[]): Obj => {
    const stream = new StreamReassembler('chat.completions');
    for (const delta of deltas)
      stream.add({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] });
    stream.add({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
    return (stream.result().choices as Obj[])[0]!.message as Obj;
  };

  it('reasoning keeps the field it came in (`reasoning` is not renamed `reasoning_content`)', () => {
    assert.deepEqual(
      reassembled([{ role: 'assistant', reasoning: 'Think ' }, { reasoning: 'twice.' }, { content: 'Hi' }]),
      {
        role: 'assistant',
        content: 'Hi',
        reasoning: 'Think twice.',
      },
    );
    const message = reassembled([{ reasoning_content: 'Deep' }, { reasoning_content: 'Seek' }, { content: 'ok' }]);
    assert.equal(message.reasoning_content, 'DeepSeek');
    assert.equal(message.reasoning, undefined);
  });

  it('OpenRouter’s reasoning_details pieces join by index and type; annotations are kept in order', () => {
    const message = reassembled([
      { reasoning: 'a', reasoning_details: [{ type: 'reasoning.text', text: 'a', index: 0, format: 'x' }] },
      { reasoning: 'b', reasoning_details: [{ type: 'reasoning.text', text: 'b', index: 0, signature: null }] },
      { reasoning_details: [{ type: 'reasoning.encrypted', data: 'Zm9v', index: 1 }] },
      { reasoning_details: [{ type: 'reasoning.text', text: '', index: 0, signature: 'sig' }] },
      { content: 'See [1].', annotations: [{ type: 'url_citation', url_citation: { url: 'https://a.example' } }] },
      { annotations: [{ type: 'url_citation', url_citation: { url: 'https://b.example' } }] },
    ]);
    assert.deepEqual(message, {
      role: 'assistant',
      content: 'See [1].',
      reasoning: 'ab',
      annotations: [
        { type: 'url_citation', url_citation: { url: 'https://a.example' } },
        { type: 'url_citation', url_citation: { url: 'https://b.example' } },
      ],
      reasoning_details: [
        { type: 'reasoning.text', text: 'ab', index: 0, format: 'x', signature: 'sig' },
        { type: 'reasoning.encrypted', data: 'Zm9v', index: 1 },
      ],
    });
  });
});
