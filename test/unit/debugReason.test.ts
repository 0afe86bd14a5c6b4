/**
 * Debug with Lightning's reason for a crashed agent (extension/debug/sessionRecords.ts, what
 * debugWithLightning.ts feeds from its debug adapter tracker): the Debug Adapter Protocol messages a Node
 * session (js-debug: the program in a child session, its exit code from the recorder file) and a Python
 * session (debugpy: stopped on the uncaught exception, then `exited`) send when the agent raises, turned into
 * the rollout's error — the exception on the first line with how it ended, then the output's last lines —
 * with the session's secrets redacted; what `lightning show`, the panel's row and the tab read back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SessionRecords, type AdapterMessage } from '../../extension/debug/sessionRecords';
import { failureHeadline, failureOutput } from '../../trainer-daemon/protocol/failureText';

const output = (text: string, category = 'stderr'): AdapterMessage => ({
  type: 'event',
  event: 'output',
  body: { category, output: text },
});
const exited = (exitCode: number): AdapterMessage => ({ type: 'event', event: 'exited', body: { exitCode } });
const KEY = 'sk-test-4f8a9b2c7d1e6f30';

describe("Debug with Lightning: a crashed agent's reason", () => {
  it('Python under debugpy: the traceback’s exception, how it ended, and the traceback’s last lines', () => {
    const sessions = new SessionRecords();
    sessions.started('py');
    sessions.observe('py', output('looking up the forecast\n', 'stdout'));
    // debugpy stops on the uncaught exception; the editor asks what it was.
    sessions.observe('py', {
      type: 'response',
      command: 'exceptionInfo',
      success: true,
      body: { exceptionId: 'ValueError', description: 'no forecast for Oslo' },
    });
    sessions.observe(
      'py',
      output('Traceback (most recent call last):\n  File "/ws/raising_agent.py", line 12, in <module>\n'),
    );
    sessions.observe('py', output('    raise ValueError("no forecast for Oslo")\nValueError: no forecast for Oslo\n'));
    sessions.observe('py', output('{"event":"ready"}', 'telemetry'));
    sessions.observe('py', exited(1));
    assert.equal(sessions.reportedExitCode('py'), 1);
    const final = sessions.final('py', sessions.reportedExitCode('py'), {});
    assert.equal(final.to, 'failed');
    assert.equal(failureHeadline(final.error!), 'ValueError: no forecast for Oslo (exited with code 1)');
    assert.deepEqual(failureOutput(final.error!).split('\n'), [
      'looking up the forecast',
      'Traceback (most recent call last):',
      '  File "/ws/raising_agent.py", line 12, in <module>',
      '    raise ValueError("no forecast for Oslo")',
      'ValueError: no forecast for Oslo',
    ]);
    assert.ok(!final.error!.includes('"event"'), 'telemetry output is not the program’s');
  });

  it('Node under js-debug: its console names the uncaught Error after the exit; the exit code comes from the recorder', () => {
    // What js-debug sent for test/e2e/editor.test.ts's crashing agent: the launch and the exit in the parent session,
    // the program's output and js-debug's own "Uncaught <class> <error>" with the stack in the child.
    const sessions = new SessionRecords();
    sessions.started('parent');
    sessions.started('child', 'parent');
    sessions.observe('parent', output('/usr/bin/node ./crash-agent.mjs\n', 'console'));
    sessions.observe('parent', output('Process exited with code 1\n', 'console'));
    sessions.observe('child', output('asked the model: It is sunny in Paris.\n', 'stdout'));
    sessions.observe(
      'child',
      output(
        'Uncaught Error Error: no forecast for Oslo\n    at <anonymous> (/ws/crash-agent.mjs:9:7)\n    at processTicksAndRejections (<node_internals>/internal/process/task_queues:95:5)\n',
      ),
    );
    assert.equal(sessions.reportedExitCode('parent'), undefined, 'js-debug sends no exited event');
    const final = sessions.final('parent', 1, {});
    assert.equal(final.to, 'failed');
    assert.equal(failureHeadline(final.error!), 'Error: no forecast for Oslo (exited with code 1)');
    const tail = failureOutput(final.error!);
    assert.match(tail, /at <anonymous> \(\/ws\/crash-agent\.mjs:9:7\)/);
    assert.match(
      tail,
      /^\/usr\/bin\/node \.\/crash-agent\.mjs\nProcess exited with code 1\n\nasked the model/,
      'the parent’s output, then the child’s',
    );
  });

  it('Node printing its own uncaught error (no debugger console): the stderr Error line', () => {
    const sessions = new SessionRecords();
    sessions.observe(
      's',
      output(
        "file:///ws/crash-agent.mjs:14\n  throw new Error('no forecast for Oslo');\n  ^\n\nError: no forecast for Oslo\n    at file:///ws/crash-agent.mjs:14:9\n\nNode.js v20.20.2\n",
      ),
    );
    assert.equal(
      failureHeadline(sessions.final('s', 1, {}).error!),
      'Error: no forecast for Oslo (exited with code 1)',
    );
  });

  it('the exception the debugger stopped on when the output names none; a secret the agent printed is redacted', () => {
    const sessions = new SessionRecords();
    sessions.observe('s', output(`calling with key ${KEY}\ngiving up\n`, 'stdout'));
    sessions.observe('s', {
      type: 'response',
      command: 'exceptionInfo',
      success: true,
      body: { exceptionId: 'SystemExit', description: '3' },
    });
    const final = sessions.final('s', 3, { OPENAI_API_KEY: KEY, PWD: '/ws' });
    assert.equal(failureHeadline(final.error!), 'SystemExit: 3 (exited with code 3)');
    assert.ok(!final.error!.includes(KEY), final.error!);
    assert.match(failureOutput(final.error!), /calling with key \S+\ngiving up$/);
  });

  it('stopped by the user at an exception: cancelled, saying where it had stopped; a clean exit has no error', () => {
    const sessions = new SessionRecords();
    sessions.observe('s', {
      type: 'response',
      command: 'exceptionInfo',
      success: true,
      body: { exceptionId: 'KeyError', description: "'city'" },
    });
    const stopped = sessions.final('s', undefined, {});
    assert.equal(stopped.to, 'cancelled');
    assert.match(stopped.error!, /it had stopped at KeyError: 'city'$/);
    assert.deepEqual(new SessionRecords().final('t', 0, {}), { to: 'succeeded', error: null });
  });

  it('forgets a finished session and its children: the next session of the same id starts clean', () => {
    const sessions = new SessionRecords();
    sessions.started('child', 'parent');
    sessions.observe('child', output('Error: first run\n'));
    sessions.observe('child', exited(2));
    assert.equal(sessions.reportedExitCode('parent'), 2, "a child's exited event counts for its parent");
    sessions.forget('parent');
    assert.equal(sessions.reportedExitCode('parent'), undefined);
    assert.equal(sessions.final('parent', 1, {}).error, 'exited with code 1');
  });
});
