/**
 * A training run's one Ray driver (runner/rayDriver.ts, SharedRayDriver) against a stand-in runner that speaks the
 * driver's line protocol (PROTOCOL.md, "Ray runner") without Ray: reused while it lives, started again once it died,
 * ended by close. The real driver on a real Ray head: test/integration/rayTraining.test.ts.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { SharedRayDriver } from '../../trainer-daemon/runner/rayDriver';
import { tempDir, waitFor } from '../helpers/tmp';

/**
 * Answers `ready`, runs each `start` as an agent that exits 0 at once (naming the runner's pid), exits on `shutdown`.
 */
const FAKE_RUNNER = `
const readline = require('node:readline');
process.stderr.write('fake runner ' + process.pid + ' connected\\n');
const out = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
out({ type: 'ready', ray: '0', address: 'fake', nodes: [] });
const where = { nodeId: 'n' + process.pid, ip: '127.0.0.1', host: 'fake' };
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const m = JSON.parse(line);
  if (m.type === 'shutdown') process.exit(0);
  if (m.type === 'start') {
    out({ type: 'started', id: m.id, where, pid: process.pid });
    out({ type: 'exit', id: m.id, code: 0, signal: null, timedOut: false, where });
  }
}).on('close', () => process.exit(0));
`;

/** A "python" that runs the stand-in whatever `-m … --address …` it is given. */
function fakePython(dir: string): string {
  const script = path.join(dir, 'runner.cjs');
  fs.writeFileSync(script, FAKE_RUNNER);
  const python = path.join(dir, 'python');
  fs.writeFileSync(python, `#!/bin/sh\nexec "${process.execPath}" "${script}"\n`, { mode: 0o755 });
  return python;
}

const spec = { command: ['true'], cwd: null, env: {}, envDefaults: {}, timeoutMs: null, graceMs: 100 };

describe("a run's shared Ray driver", () => {
  it('serves every batch with one driver, starts a new one when it died, and ends it on close', async (t) => {
    const dir = tempDir(t);
    const log = path.join(dir, 'ray-driver.log');
    const shared = new SharedRayDriver({ address: 'fake', python: fakePython(dir) }, log);
    t.after(() => shared.kill());
    const first = await shared.acquire();
    const ranOn = async (): Promise<string> =>
      (await (await shared.acquire()).launch(spec, () => undefined).exited).where!.nodeId;
    const node = await ranOn();
    assert.equal(await ranOn(), node, 'the second batch ran on the same driver');
    assert.equal(await shared.acquire(), first);

    first.kill();
    await waitFor(() => !first.alive, 'the killed driver to exit', 10_000);
    const second = await shared.acquire();
    assert.notEqual(second, first, 'a dead driver is started again');
    assert.notEqual(await ranOn(), node);

    await shared.close();
    assert.equal(second.alive, false, 'close ends it');
    await assert.rejects(shared.acquire(), /the Ray driver of this run was closed/);
    // The drivers' stderr reaches the log file through a write stream: a moment after they exit.
    const connections = (): number | undefined => fs.readFileSync(log, 'utf8').match(/connected/g)?.length;
    await waitFor(() => connections() === 2, 'both connections in the log', 5_000).catch(() => undefined);
    assert.equal(connections(), 2, 'two connections in all, logged in one file');
  });
});
