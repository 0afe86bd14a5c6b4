/**
 * The pure parts of the editor's Optimize This Prompt: which text is the prompt (selection, the
 * literal under the cursor, a prompt file), the suggested resource name, a launch configuration as
 * a command, the settings, and what `training/start` is sent: the APO configuration and the start's variables.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { launchToCommand } from '../../extension/debug/launchCommand';
import { defaultResourceName, isPromptFile, literalAround, promptTarget } from '../../extension/apo/promptTarget';
import { apoConfig, apoStartEnv, LAPTOP_DEFAULTS, parseSetting } from '../../extension/apo/apoSettings';
import { endText, progressFraction, progressText } from '../../extension/training/runText';
import { applyTextEdit, promptEdit, type ApoResult, type TrainingRunSummary } from '../../trainer-daemon/protocol';
import { testApoConfig } from '../helpers/trainingConfigs';

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

describe('Optimize This Prompt: the settings and what training/start is sent', () => {
  const agent = {
    argv: ['node', 'agent.mjs', '--x'],
    cwd: '/w',
    env: { MODEL: 'm1', OPENAI_API_KEY: 'sk-launch-secret-0123456789', DEBUG: undefined },
    notes: [],
  };

  it('builds the APO configuration with every setting and the agent; secrets stay out of it', () => {
    const config = apoConfig({
      resource: 'p',
      dataset: 'sums',
      valDataset: null,
      settings: { ...LAPTOP_DEFAULTS, rounds: 1 },
      promptFile: '/w/p.txt',
      agent,
      processEnv: { HOME: '/home/u' },
    });
    assert.ok(config.ok, config.ok ? '' : config.message);
    assert.deepEqual(
      {
        algorithm: config.value.algorithm,
        command: config.value.command,
        upstream: config.value.upstream,
        rounds: config.value.rounds,
        beam: config.value.beam,
        budgetCalls: config.value.budgetCalls,
        critiqueModel: config.value.critiqueModel,
        promptFile: config.value.promptFile,
        valDataset: config.value.valDataset,
      },
      {
        algorithm: 'apo',
        command: { argv: ['node', 'agent.mjs', '--x'], cwd: '/w', env: { MODEL: 'm1' } },
        upstream: null,
        rounds: 1,
        beam: LAPTOP_DEFAULTS.beam,
        budgetCalls: LAPTOP_DEFAULTS.budgetCalls,
        critiqueModel: LAPTOP_DEFAULTS.critiqueModel,
        promptFile: '/w/p.txt',
        valDataset: null,
      },
    );
    assert.ok(!JSON.stringify(config.value).includes('sk-launch-secret'), 'the key is not in what is stored');
  });

  it("takes the agent's own OPENAI_BASE_URL (else the editor's) as the upstream, and refuses what the daemon would", () => {
    const base = { resource: 'p', dataset: 'd', valDataset: 'held-out', settings: LAPTOP_DEFAULTS, promptFile: null };
    const own = apoConfig({
      ...base,
      agent: { ...agent, env: { OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1/' } },
      processEnv: { OPENAI_BASE_URL: 'https://editor.example/v1' },
    });
    assert.deepEqual(own.ok && [own.value.upstream, own.value.valDataset], ['http://127.0.0.1:11434/v1', 'held-out']);
    const editors = apoConfig({ ...base, agent, processEnv: { OPENAI_BASE_URL: 'https://editor.example/v1' } });
    assert.equal(editors.ok && editors.value.upstream, 'https://editor.example/v1');
    const bad = apoConfig({ ...base, settings: { ...LAPTOP_DEFAULTS, beam: 0 }, agent, processEnv: {} });
    assert.deepEqual(bad.ok ? undefined : /^config\.beam: /.test(bad.message), true, bad.ok ? '' : bad.message);
  });

  it('gives the start every variable of the launch configuration, secrets too, an unset as null', () => {
    assert.deepEqual(apoStartEnv(agent), { MODEL: 'm1', OPENAI_API_KEY: 'sk-launch-secret-0123456789', DEBUG: null });
  });

  it('checks typed settings with a message naming the setting', () => {
    assert.deepEqual(parseSetting('beam', '3'), { ok: true, value: 3 });
    assert.deepEqual(parseSetting('beam', '0'), { ok: false, message: 'Beam width must be a whole number ≥ 1' });
    assert.deepEqual(parseSetting('rounds', 'two'), { ok: false, message: 'Rounds must be a number' });
    assert.deepEqual(parseSetting('temperature', '2.5'), { ok: false, message: 'Temperature must be between 0 and 2' });
    assert.deepEqual(parseSetting('critiqueModel', ' llama3 '), { ok: true, value: 'llama3' });
  });
});

describe('Optimize This Prompt: following its run', () => {
  const apo = (extra: Partial<TrainingRunSummary>): TrainingRunSummary =>
    ({
      id: 'run-1',
      status: 'running',
      createdAt: 1,
      startedAt: 1,
      endedAt: null,
      error: null,
      errorKind: null,
      cancelRequested: false,
      result: null,
      algorithm: 'apo',
      config: testApoConfig({ rounds: 2 }),
      step: 0,
      latest: {},
      ...extra,
    }) as TrainingRunSummary;

  it('says which round it is in, the best validation score and what it spent', () => {
    assert.equal(progressText(apo({})), 'scoring the original prompt…');
    assert.equal(
      progressText(apo({ latest: { best_val_score: 0.5, rollouts: 4 } })),
      'the original prompt scores 0.5 on validation; round 1/2…',
    );
    const first = apo({ step: 1, latest: { best_val_score: 0.75, llm_calls: 8, rollouts: 20 } });
    assert.equal(progressText(first), 'round 1/2 · best validation score 0.75 · 8 LLM calls · 20 rollouts');
    assert.equal(progressFraction(first), 0.5);
    assert.equal(progressText(apo({ cancelRequested: true })), 'cancelling…');
  });

  it('ends with the scores, or says its candidates are kept (it is not resumed)', () => {
    const result: ApoResult = {
      runId: 'run-1',
      resource: 'prompt',
      seed: { candidateId: 'seed', version: 1, prompt: 'a', valScore: 0.5 },
      best: { candidateId: 'r1-1', version: 2, prompt: 'b', valScore: 1 },
      diff: '',
      roundsCompleted: 2,
      llmCalls: 8,
      rollouts: 20,
      stopReason: 'completed',
      skipped: [],
    };
    assert.equal(
      endText(apo({ status: 'succeeded', step: 2, result })),
      'training run run-1 finished after 2 round(s): validation score 0.5 → 1.',
    );
    assert.equal(
      endText(apo({ status: 'cancelled', step: 1 })),
      'training run run-1 cancelled after 1 round(s); its candidates and best prompt so far are kept.',
    );
  });
});
