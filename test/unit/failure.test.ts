/**
 * A failed rollout's reason (protocol/failure.ts): the exception found in an agent's output, the last lines, secrets
 * redacted.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  envSecrets,
  exceptionFromInfo,
  exceptionOf,
  failureHeadline,
  failureOutput,
  failureText,
  lastLines,
  OutputTail,
} from '../../trainer-daemon/protocol/failure';
import { isSecretVariable } from '../../trainer-daemon/protocol/secrets';

const PYTHON = `starting
Traceback (most recent call last):
  File "/ws/agent.py", line 12, in <module>
    print(average([]))
  File "/ws/agent.py", line 9, in average
    return sum(readings) / len(readings)
           ~~~~~~~~~~~~~^~~~~~~~~~~~~~~
ZeroDivisionError: division by zero
`;

const NODE = `/ws/agent.mjs:6
  return JSON.parse(text).temperature;
              ^

SyntaxError: Unexpected token 's', "sunny, 24 degrees" is not valid JSON
    at JSON.parse (<anonymous>)
    at parseReply (file:///ws/agent.mjs:6:15)
    at file:///ws/agent.mjs:9:1

Node.js v24.1.0
`;

describe('the exception in an agent’s output', () => {
  it('is a Python traceback’s last line', () => {
    assert.equal(exceptionOf(PYTHON), 'ZeroDivisionError: division by zero');
    assert.equal(
      exceptionOf(
        'Traceback (most recent call last):\n  File "a.py", line 1\nmypkg.errors.QuotaExceeded\nKeyboardInterrupt\n',
      ),
      'KeyboardInterrupt',
    );
  });

  it('is Node’s uncaught error line, above its stack', () => {
    assert.equal(exceptionOf(NODE), 'SyntaxError: Unexpected token \'s\', "sunny, 24 degrees" is not valid JSON');
    assert.equal(exceptionOf('Uncaught Error [ERR_BAD]: nope\n    at x (y.js:1:1)\n'), 'Error [ERR_BAD]: nope');
    // js-debug's console: the class, then the error's own line (seen in the e2e, test/e2e/editor.test.ts).
    assert.equal(
      exceptionOf('Uncaught Error Error: no forecast for Oslo\n    at <anonymous> (/ws/crash-agent.mjs:9:7)\n'),
      'Error: no forecast for Oslo',
    );
    assert.equal(exceptionOf('Uncaught TypeError TypeError: x is not a function\n'), 'TypeError: x is not a function');
    assert.equal(exceptionOf('Uncaught something odd happened\n'), undefined);
  });

  it('is nothing when the output names none', () => {
    assert.equal(exceptionOf('all good\nexiting with 2\n'), undefined);
    assert.equal(exceptionOf('    Error: indented, a stack frame’s text\n'), undefined);
  });
});

describe('a failure’s text', () => {
  it('leads with the exception and how the process ended, then the last lines', () => {
    const text = failureText('exited with code 1', PYTHON);
    assert.equal(failureHeadline(text), 'ZeroDivisionError: division by zero (exited with code 1)');
    assert.equal(failureOutput(text), PYTHON.trimEnd());
  });

  it('is the ending alone without output; the ending first without an exception', () => {
    assert.equal(failureText('exited with code 3', ''), 'exited with code 3');
    assert.equal(
      failureText('exited with code 2', 'usage: agent.py TASK\n'),
      'exited with code 2\n\nusage: agent.py TASK',
    );
  });

  it('keeps the last 20 lines, cut to 300 characters, escape codes removed', () => {
    const output =
      Array.from({ length: 50 }, (_, i) => `line ${i}`).join('\n') + `\n\x1b[31m${'x'.repeat(1000)}\x1b[0m\n\n`;
    const lines = lastLines(output);
    assert.equal(lines.length, 20);
    assert.equal(lines[0], 'line 31');
    assert.equal(lines.at(-1)!.length, 300);
    assert.ok(lines.at(-1)!.startsWith('xxx'));
  });

  it('has the environment’s secret values and key-shaped strings redacted', () => {
    const env = {
      WEATHER_SERVICE_TOKEN: 'plain-value-4242-abcd',
      HOME: '/home/me',
      PWD: '/home/me/agent',
      LIGHTNING_URL: 'http://127.0.0.1:1/r/abcdefabcdefabcdef',
    };
    const secrets = envSecrets(env, isSecretVariable);
    assert.deepEqual(secrets, ['plain-value-4242-abcd']);
    const text = failureText(
      'exited with code 1',
      `token plain-value-4242-abcd\nkey sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4\nhome /home/me\n${NODE}`,
      secrets,
    );
    assert.ok(!text.includes('plain-value-4242-abcd') && !text.includes('sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4'), text);
    assert.match(text, /token \[redacted\]/);
    assert.match(text, /home \/home\/me/);
  });

  it('takes a debugger’s exception when the output names none', () => {
    assert.equal(
      exceptionFromInfo({ exceptionId: 'ZeroDivisionError', description: 'division by zero' }),
      'ZeroDivisionError: division by zero',
    );
    assert.equal(
      exceptionFromInfo({ exceptionId: 'Error', description: 'Error: boom\n    at main (/ws/a.js:1:1)' }),
      'Error: boom',
    );
    assert.equal(exceptionFromInfo({}), undefined);
    const text = failureText(
      'exited with code 1',
      'no traceback printed\n',
      [],
      exceptionOf('no traceback printed') ?? 'ValueError: bad city',
    );
    assert.equal(failureHeadline(text), 'ValueError: bad city (exited with code 1)');
  });
});

describe('the output held while an agent runs', () => {
  it('keeps its end only', () => {
    const tail = new OutputTail();
    for (let i = 0; i < 5000; i += 1) tail.push(`line ${i}\n`);
    tail.push(Buffer.from('ValueError: last\n'));
    assert.ok(tail.text.length <= 16 * 1024);
    assert.equal(exceptionOf(tail.text), 'ValueError: last');
  });

  it('keeps a character whole when its bytes come in two chunks', () => {
    const tail = new OutputTail();
    const bytes = Buffer.from('KeyError: café ✓\n');
    const cut = bytes.indexOf(0xc3) + 1; // inside é's two bytes
    tail.push(bytes.subarray(0, cut));
    tail.push(bytes.subarray(cut));
    assert.equal(exceptionOf(tail.text), 'KeyError: café ✓');
  });
});
