import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  anthropicRequestToChat,
  anthropicResponseEvents,
  anthropicResponseToChat,
  asChatCall,
  chatToAnthropicResponse,
  chatToGeminiResponse,
  geminiRequestToChat,
  geminiResponseToChat,
  type Json,
} from '../../trainer-daemon/protocol';
import { AnthropicReassembler } from '../../trainer-daemon/capture/anthropic';
import { geminiCall, GeminiReassembler } from '../../trainer-daemon/capture/gemini';

type Obj = { [key: string]: Json };

describe('the Anthropic Messages API as chat completions', () => {
  it('a request: system blocks, images, tool use and results, thinking, tool choice and sampling', () => {
    const chat = anthropicRequestToChat({
      model: 'claude',
      max_tokens: 100,
      temperature: 0.2,
      stop_sequences: ['END'],
      tool_choice: { type: 'any' },
      system: [
        { type: 'text', text: 'Be terse.', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: 'Use tools.' },
      ],
      tools: [
        { name: 'get_weather', description: 'weather', input_schema: { type: 'object' } },
        { type: 'web_search_20250305', name: 'web_search' },
      ],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Paris?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAA' } },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'use the tool', signature: 's' },
            { type: 'redacted_thinking', data: 'x' },
            { type: 'tool_use', id: 't1', name: 'get_weather', input: { city: 'Paris' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'sunny' }] },
            { type: 'text', text: 'and Oslo?' },
          ],
        },
      ],
    });
    assert.deepEqual(chat, {
      model: 'claude',
      max_tokens: 100,
      temperature: 0.2,
      stop: ['END'],
      tool_choice: 'required',
      tools: [
        { type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object' } } },
      ],
      messages: [
        { role: 'system', content: 'Be terse.\nUse tools.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Paris?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAA' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          reasoning_content: 'use the tool\n[redacted thinking]',
          tool_calls: [
            { id: 't1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 't1', content: 'sunny' },
        { role: 'user', content: 'and Oslo?' },
      ],
    });
  });

  it('a response: usage counts cached input; a chat answer back, with unparseable arguments kept as an empty input', () => {
    const chat = anthropicResponseToChat({
      id: 'msg_1',
      model: 'claude',
      content: [{ type: 'text', text: 'Hi' }],
      stop_reason: 'max_tokens',
      usage: { input_tokens: 4, cache_read_input_tokens: 6, cache_creation_input_tokens: 1, output_tokens: 2 },
    });
    assert.deepEqual(chat.usage, { prompt_tokens: 11, completion_tokens: 2, total_tokens: 13 });
    assert.equal((chat.choices as Obj[])[0]!.finish_reason, 'length');
    const back = chatToAnthropicResponse(
      {
        id: 'c1',
        choices: [
          {
            message: { content: 'ok', tool_calls: [{ id: 'x', function: { name: 'f', arguments: '{not json' } }] },
            finish_reason: 'tool_calls',
          },
        ],
        usage: { prompt_tokens: 3, completion_tokens: 1 },
      },
      'claude',
    );
    assert.deepEqual(back.content, [
      { type: 'text', text: 'ok' },
      { type: 'tool_use', id: 'x', name: 'f', input: {} },
    ]);
    assert.equal(back.stop_reason, 'tool_use');
    // The server names the stop sequence that ended it (vLLM's and the policy server's `stop_reason`).
    const stopped = chatToAnthropicResponse(
      { id: 'c3', choices: [{ message: { content: 'Paris' }, finish_reason: 'stop', stop_reason: '\n\nHuman:' }] },
      'claude',
    );
    assert.deepEqual([stopped.stop_reason, stopped.stop_sequence], ['stop_sequence', '\n\nHuman:']);
    const ended = chatToAnthropicResponse(
      { id: 'c4', choices: [{ message: { content: 'x' }, finish_reason: 'stop' }] },
      'claude',
    );
    assert.deepEqual([ended.stop_reason, ended.stop_sequence], ['end_turn', null]);
    // Cut at max_tokens with a call parsed from what it holds: max_tokens, not tool_use (Gemini: MAX_TOKENS); a
    // filtered answer is Gemini's SAFETY.
    const cut = {
      id: 'c5',
      choices: [
        {
          message: { content: null, tool_calls: [{ id: 'y', function: { name: 'f', arguments: '{"a": 1}' } }] },
          finish_reason: 'length',
        },
      ],
    };
    assert.equal(chatToAnthropicResponse(cut, 'claude').stop_reason, 'max_tokens');
    const candidate = (chat: Obj): Obj => (chatToGeminiResponse(chat, 'gemini').candidates as Obj[])[0]!;
    assert.equal(candidate(cut).finishReason, 'MAX_TOKENS');
    assert.equal(
      candidate({ id: 'c6', choices: [{ message: { content: '' }, finish_reason: 'content_filter' }] }).finishReason,
      'SAFETY',
    );
    const delta = anthropicResponseEvents(stopped).find((event) => event.event === 'message_delta')!;
    assert.deepEqual(delta.data.delta, { stop_reason: 'stop_sequence', stop_sequence: '\n\nHuman:' });
  });

  it('the events synthesized for a whole message reassemble into that message', () => {
    const message = chatToAnthropicResponse(
      {
        id: 'c2',
        choices: [
          {
            message: {
              content: 'Sunny.',
              reasoning_content: 'think',
              tool_calls: [{ id: 't', function: { name: 'f', arguments: '{"a":1}' } }],
            },
            finish_reason: 'stop',
          },
        ],
        usage: { prompt_tokens: 3, completion_tokens: 4 },
      },
      'claude',
    );
    const events = anthropicResponseEvents(message);
    assert.deepEqual(
      [...new Set(events.map((e) => e.event))],
      [
        'message_start',
        'content_block_start',
        'content_block_delta',
        'content_block_stop',
        'message_delta',
        'message_stop',
      ],
    );
    const reassembler = new AnthropicReassembler();
    for (const { data } of events) reassembler.add(data);
    assert.deepEqual(reassembler.result(), message);
    assert.equal(reassembler.error, undefined);
  });

  it('a stream error is reported; an unfinished tool input is kept unparsed', () => {
    const reassembler = new AnthropicReassembler();
    reassembler.add({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 't', name: 'f', input: {} },
    });
    reassembler.add({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: '{"a":' },
    });
    reassembler.add({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
    assert.equal(reassembler.error, 'overloaded_error: Overloaded');
    assert.deepEqual((reassembler.result().content as Obj[])[0]!.input, { lightning_unparsed_input: '{"a":' });
  });
});

describe('the Gemini API as chat completions', () => {
  it('the model and streaming come from the URL', () => {
    assert.deepEqual(geminiCall('/v1beta/models/gemini-2.5-flash:streamGenerateContent'), {
      model: 'gemini-2.5-flash',
      stream: true,
    });
    assert.deepEqual(geminiCall('/v1beta/models/m:generateContent'), { model: 'm', stream: false });
    assert.equal(geminiCall('/v1beta/models/m:countTokens'), null);
  });

  it('a request with function calls and responses; a response back and forth', () => {
    const chat = geminiRequestToChat(
      {
        systemInstruction: { parts: [{ text: 'Be terse.' }] },
        contents: [
          { role: 'user', parts: [{ text: 'Paris?' }] },
          { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } } }] },
          { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { result: 'sunny' } } }] },
        ],
        tools: [{ functionDeclarations: [{ name: 'get_weather', parametersJsonSchema: { type: 'object' } }] }],
        generationConfig: { maxOutputTokens: 50, temperature: 0 },
      },
      'gemini-x',
    );
    assert.deepEqual(chat.messages, [
      { role: 'system', content: 'Be terse.' },
      { role: 'user', content: 'Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1_0', content: '{"result":"sunny"}' },
    ]);
    assert.deepEqual([chat.model, chat.max_tokens, chat.temperature], ['gemini-x', 50, 0]);
    const back = chatToGeminiResponse(
      {
        id: 'c',
        choices: [
          {
            message: {
              content: null,
              tool_calls: [{ id: 'k', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
            },
          },
        ],
        usage: { prompt_tokens: 5, completion_tokens: 2 },
      },
      'gemini-x',
    );
    const again = geminiResponseToChat(back);
    assert.equal(((again.choices as Obj[])[0]!.message as Obj).tool_calls !== undefined, true);
    assert.equal((again.choices as Obj[])[0]!.finish_reason, 'tool_calls');
    assert.deepEqual(again.usage, { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
  });

  it('two calls of one function in a turn: unique ids by position, the same in the response and in every later history; responses paired by order and name', () => {
    const twoCalls: Obj[] = [
      { functionCall: { name: 'get_weather', args: { city: 'Paris' } } },
      { functionCall: { name: 'get_weather', args: { city: 'Oslo' } } },
      { functionCall: { name: 'get_time', args: {} } },
    ];
    const first: { contents: Obj[]; tools: Json } = {
      contents: [{ role: 'user', parts: [{ text: 'Paris and Oslo?' }] }],
      tools: [{ functionDeclarations: [{ name: 'get_weather' }, { name: 'get_time' }] }],
    };
    const answer = {
      candidates: [{ content: { role: 'model', parts: twoCalls } as Obj, finishReason: 'STOP' }],
      responseId: 'r1',
    };
    const recorded = asChatCall({
      'lightning.api': 'gemini.generate_content',
      'gen_ai.request.model': 'g',
      'lightning.request': first,
      'lightning.response': answer,
    });
    const ids = (((recorded.response!.choices as Obj[])[0]!.message as Obj).tool_calls as Obj[]).map((call) => call.id);
    assert.deepEqual(ids, ['call_1_0', 'call_1_1', 'call_1_2']);
    // The agent answers out of order for the two names, in order within one name (as the SDKs' loops do).
    const results: Obj[] = [
      { functionResponse: { name: 'get_time', response: { now: 'noon' } } },
      { functionResponse: { name: 'get_weather', response: { result: 'Paris: sunny' } } },
      { functionResponse: { name: 'get_weather', response: { result: 'Oslo: snow' } } },
    ];
    const second: Obj = {
      ...first,
      contents: [...first.contents, answer.candidates[0]!.content, { role: 'user', parts: results }],
    };
    const chat = geminiRequestToChat(second, 'g');
    const messages = chat.messages as Obj[];
    assert.deepEqual(
      (messages[1]!.tool_calls as Obj[]).map((call) => call.id),
      ids,
      'the history reads the ids the response had',
    );
    assert.deepEqual(
      messages.slice(2).map((m) => [m.tool_call_id, m.content]),
      [
        ['call_1_2', '{"now":"noon"}'],
        ['call_1_0', '{"result":"Paris: sunny"}'],
        ['call_1_1', '{"result":"Oslo: snow"}'],
      ],
    );
    // Ids the API (or a translated policy) gave are kept, and a response naming one is paired by it.
    const withIds: Obj = {
      contents: [
        { role: 'user', parts: [{ text: 'x' }] },
        {
          role: 'model',
          parts: [
            { functionCall: { id: 'k1', name: 'f', args: {} } },
            { functionCall: { id: 'k2', name: 'f', args: {} } },
          ],
        },
        {
          role: 'user',
          parts: [
            { functionResponse: { id: 'k2', name: 'f', response: { n: 2 } } },
            { functionResponse: { name: 'f', response: { n: 1 } } },
          ],
        },
      ],
    };
    assert.deepEqual(
      (geminiRequestToChat(withIds, 'g').messages as Obj[]).slice(2).map((m) => [m.tool_call_id, m.content]),
      [
        ['k2', '{"n":2}'],
        ['k1', '{"n":1}'],
      ],
    );
    // Through the translation and back, a policy's ids reach the agent and pair its answers.
    const back = chatToGeminiResponse(
      {
        id: 'c',
        choices: [
          {
            message: {
              content: null,
              tool_calls: [
                { id: 'call_a', function: { name: 'f', arguments: '{}' } },
                { id: 'call_b', function: { name: 'f', arguments: '{}' } },
              ],
            },
          },
        ],
      },
      'g',
    );
    const replay = {
      contents: [
        { role: 'user', parts: [{ text: 'x' }] },
        (back.candidates as Obj[])[0]!.content!,
        {
          role: 'user',
          parts: [{ functionResponse: { name: 'f', response: {} } }, { functionResponse: { name: 'f', response: {} } }],
        },
      ],
    } as Obj;
    assert.deepEqual(
      (geminiRequestToChat(replay, 'g').messages as Obj[]).slice(2).map((m) => m.tool_call_id),
      ['call_a', 'call_b'],
    );
  });

  it('stream chunks merge: texts join by kind, function calls stay whole, the last usage wins', () => {
    const reassembler = new GeminiReassembler();
    reassembler.add({
      candidates: [{ content: { role: 'model', parts: [{ text: 'hm', thought: true }] }, index: 0 }],
      responseId: 'r',
    });
    reassembler.add({ candidates: [{ content: { role: 'model', parts: [{ text: 'It is ' }] }, index: 0 }] });
    reassembler.add({
      candidates: [
        {
          content: { role: 'model', parts: [{ text: 'sunny.' }, { functionCall: { name: 'f', args: {} } }] },
          finishReason: 'STOP',
          index: 0,
        },
      ],
      usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 2 },
    });
    assert.deepEqual(reassembler.result(), {
      candidates: [
        {
          index: 0,
          finishReason: 'STOP',
          content: {
            role: 'model',
            parts: [{ text: 'hm', thought: true }, { text: 'It is sunny.' }, { functionCall: { name: 'f', args: {} } }],
          },
        },
      ],
      responseId: 'r',
      usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 2 },
    });
  });
});

describe('asChatCall', () => {
  it('reads OpenAI calls as they are and Gemini calls with the model from the span', () => {
    const openai = {
      'lightning.api': 'chat.completions',
      'lightning.request': { messages: [] },
      'lightning.response': { choices: [] },
    };
    assert.deepEqual(asChatCall(openai), { request: { messages: [] }, response: { choices: [] } });
    const gemini = asChatCall({
      'lightning.api': 'gemini.generate_content',
      'gen_ai.request.model': 'g',
      'lightning.request': { contents: 'hi' },
    });
    assert.deepEqual(gemini.request, { model: 'g', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(gemini.response, null);
  });
});
