/**
 * The pure parts of the editor's Optimize This Prompt: which text is the prompt (selection, the
 * literal under the cursor, a prompt file), the suggested resource name, a launch configuration as
 * a command, the settings and their CLI arguments, and the reading of `train --json` lines.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { launchToCommand } from '../../extension/debug/launchCommand';
import { defaultResourceName, isPromptFile, literalAround, promptTarget } from '../../extension/apo/promptTarget';
import { LAPTOP_DEFAULTS, parseSetting, parseTrainLine, trainArgs } from '../../extension/apo/trainArgs';
import { applyTextEdit, promptEdit } from '../../trainer-daemon/protocol';

const SOURCE = `const SYSTEM_PROMPT = 'Say \\'hi\\' to {name}.\\nBe brief.'; // greeting\nconst other = "x";\n`;
const inner = (text: string, literal: string): { start: number; end: number } => {
  const start = text.indexOf(literal);
  return { start, end: start + literal.length };
};

describe('Optimize This Prompt: the prompt', () => {
  it('takes a selected literal’s contents, decoded, with or without its quotes', () => {
    const contents = `Say \\'hi\\' to {name}.\\nBe brief.`;
    const { start, end } = inner(SOURCE, contents);
    for (const selection of [
      { start, end },
      { start: start - 1, end: end + 1 },
    ]) {
      const target = promptTarget(SOURCE, selection, false)!;
      assert.equal(target.prompt, "Say 'hi' to {name}.\nBe brief.");
      assert.deepEqual(target.location, { start, end, sourceText: contents });
      assert.equal(target.kind, "'");
      assert.equal(target.wholeFile, false);
    }
  });

  it('takes the literal around the cursor, not one before a line comment or on another line', () => {
    const cursor = SOURCE.indexOf('to {name}');
    assert.deepEqual(literalAround(SOURCE, cursor), [SOURCE.indexOf('Say'), SOURCE.indexOf("'; //")]);
    assert.equal(promptTarget(SOURCE, { start: cursor, end: cursor }, false)?.prompt, "Say 'hi' to {name}.\nBe brief.");
    assert.equal(literalAround(SOURCE, SOURCE.indexOf('greeting')), undefined);
    assert.equal(
      promptTarget(SOURCE, { start: 0, end: 0 }, false),
      undefined,
      'the cursor on `const`: no prompt in a code file',
    );
  });

  it('takes a whole prompt file when nothing is selected; plain selections stay plain', () => {
    const text = 'You triage tickets.\nTicket: {ticket}\n';
    assert.deepEqual(promptTarget(text, { start: 3, end: 3 }, true), {
      location: { start: 0, end: text.length, sourceText: text },
      kind: 'plain',
      prompt: text,
      wholeFile: true,
    });
    assert.equal(promptTarget('  \n', { start: 0, end: 0 }, true), undefined);
    const plain = promptTarget(text, { start: 0, end: 19 }, true)!;
    assert.deepEqual([plain.prompt, plain.kind, plain.wholeFile], ['You triage tickets.', 'plain', false]);
    assert.ok(
      isPromptFile('/w/prompts/triage.txt', 'plaintext') &&
        isPromptFile('/w/p.prompt', 'unknown') &&
        !isPromptFile('/w/agent.ts', 'typescript'),
    );
  });

  it('round-trips with promptEdit: the optimized prompt goes back into the same literal, re-escaped', () => {
    const target = promptTarget(
      SOURCE,
      { start: SOURCE.indexOf('to {name}'), end: SOURCE.indexOf('to {name}') },
      false,
    )!;
    const edited = applyTextEdit(
      SOURCE,
      promptEdit(SOURCE, target.location, "Say 'hello' to {name}.\nAnswer in one line."),
    );
    assert.equal(
      edited,
      `const SYSTEM_PROMPT = 'Say \\'hello\\' to {name}.\\nAnswer in one line.'; // greeting\nconst other = "x";\n`,
    );
  });

  it('suggests a resource name from the variable, else the file name', () => {
    assert.equal(defaultResourceName(SOURCE, SOURCE.indexOf('Say'), '/w/agent.mjs'), 'system-prompt');
    assert.equal(defaultResourceName('prompt = f"""Hi', 13, '/w/a.py'), 'prompt');
    assert.equal(defaultResourceName('  systemPrompt: `x`', 16, '/w/a.ts'), 'system-prompt');
    assert.equal(defaultResourceName('Hello', 0, '/w/prompts/Ticket Triage.txt'), 'ticket-triage');
    assert.equal(defaultResourceName('Hello', 0, '/w/123.txt'), 'prompt');
  });
});

describe('Optimize This Prompt: the agent command (the one converter Run Dataset and Start Training use too)', () => {
  const context = { workspaceFolder: '/w/project', processEnv: { HOME: '/home/u', MODEL: 'm1' }, home: '/home/u' };

  it('turns a Node launch configuration into a command, substituting variables', () => {
    const result = launchToCommand(
      {
        type: 'node',
        request: 'launch',
        name: 'Agent',
        program: '${workspaceFolder}/agent.mjs',
        args: ['--model', '${env:MODEL}'],
        runtimeArgs: ['--enable-source-maps'],
        env: { A: '1', B: null },
        cwd: '${workspaceFolder}/sub',
      },
      context,
    );
    assert.deepEqual(result, {
      ok: true,
      command: {
        argv: ['node', '--enable-source-maps', '/w/project/agent.mjs', '--model', 'm1'],
        cwd: '/w/project/sub',
        env: { A: '1', B: undefined },
        notes: [],
      },
    });
  });

  it('turns Python launches (program or module) into commands', () => {
    assert.deepEqual(
      launchToCommand(
        { type: 'debugpy', request: 'launch', name: 'Py', module: 'agent.main', args: '--fast --n 3' },
        context,
      ),
      {
        ok: true,
        command: { argv: ['python3', '-m', 'agent.main', '--fast', '--n', '3'], cwd: '/w/project', env: {}, notes: [] },
      },
    );
    assert.deepEqual(
      launchToCommand(
        { type: 'python', request: 'launch', name: 'Py', program: 'run.py', python: '/venv/bin/python' },
        context,
      ).ok && true,
      true,
    );
  });

  it('refuses what it cannot run, naming the configuration and the reason', () => {
    assert.deepEqual(
      launchToCommand({ type: 'node', request: 'launch', name: 'Current file', program: '${file}' }, context),
      {
        ok: false,
        message:
          '"Current file" cannot be run without the debugger: program uses ${file}, which has a value only inside a debug session; replace it with a path or ${workspaceFolder}',
      },
    );
    assert.match(
      (launchToCommand({ type: 'chrome', request: 'launch', name: 'Web' }, context) as { message: string }).message,
      /^"Web" has debug type "chrome": Lightning runs node and python launch configurations/,
    );
    assert.deepEqual(launchToCommand({ type: 'node', request: 'launch', name: 'No program' }, context), {
      ok: false,
      message: '"No program" cannot be run without the debugger: it has no "program" (or "runtimeArgs") to run',
    });
  });
});

describe('Optimize This Prompt: settings and the CLI', () => {
  it('builds `train --algorithm apo --json` with every setting, the agent after --, and no key', () => {
    const args = trainArgs({
      storeFile: '/w/.lightning/store.db',
      resource: 'p',
      dataset: 'sums',
      valDataset: null,
      settings: { ...LAPTOP_DEFAULTS, rounds: 1 },
      promptFile: '/w/p.txt',
      agentArgv: ['node', 'agent.mjs', '--x'],
    });
    assert.deepEqual(args.slice(0, 9), [
      'train',
      '--algorithm',
      'apo',
      '--json',
      '--store',
      '/w/.lightning/store.db',
      '--resource',
      'p',
      '--dataset',
    ]);
    assert.deepEqual(args.slice(args.indexOf('--rounds'), args.indexOf('--rounds') + 2), ['--rounds', '1']);
    assert.deepEqual(args.slice(-6), ['--prompt-file', '/w/p.txt', '--', 'node', 'agent.mjs', '--x']);
    assert.ok(!args.includes('--val') && !args.some((arg) => /key/i.test(arg)));
    assert.deepEqual(
      trainArgs({
        storeFile: 's',
        resource: 'p',
        dataset: 'd',
        valDataset: 'held-out',
        settings: LAPTOP_DEFAULTS,
        promptFile: null,
        agentArgv: ['a'],
      }).slice(9, 12),
      ['d', '--val', 'held-out'],
    );
  });

  it('checks typed settings with a message naming the setting', () => {
    assert.deepEqual(parseSetting('beam', '3'), { ok: true, value: 3 });
    assert.deepEqual(parseSetting('beam', '0'), { ok: false, message: 'Beam width must be a whole number ≥ 1' });
    assert.deepEqual(parseSetting('rounds', 'two'), { ok: false, message: 'Rounds must be a number' });
    assert.deepEqual(parseSetting('temperature', '2.5'), { ok: false, message: 'Temperature must be between 0 and 2' });
    assert.deepEqual(parseSetting('critiqueModel', ' llama3 '), { ok: true, value: 'llama3' });
  });

  it('reads the started and finished lines and ignores anything else', () => {
    assert.deepEqual(parseTrainLine('{"event":"training-started","algorithm":"apo","runId":"run-1"}'), {
      event: 'training-started',
      runId: 'run-1',
    });
    assert.equal(parseTrainLine('APO run run-1'), undefined);
    assert.equal(
      parseTrainLine('{"event":"training-finished","runId":"run-1"}'),
      undefined,
      'a finished line without a valid result',
    );
  });
});
