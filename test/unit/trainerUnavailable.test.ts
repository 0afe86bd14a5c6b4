/**
 * "The trainer cannot run here" travels as an error kind, `trainer_unavailable` (Set Up Trainer is offered on it),
 * from each place the daemon finds it: no Python with PyTorch, a chosen Python that is not there, a worker whose
 * Python cannot import torch.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { silentLogger } from '../../trainer-daemon/log';
import { DaemonError, mapError } from '../../trainer-daemon/protocol/errors';
import { findPython } from '../../trainer-daemon/training/python';
import { TrainerWorker } from '../../trainer-daemon/training/worker';
import { tempDir } from '../helpers/tmp';

const unavailable = (error: unknown): boolean =>
  error instanceof DaemonError &&
  error.kind === 'trainer_unavailable' &&
  mapError(error).kind === 'trainer_unavailable';

describe('the trainer unavailable, as a kind', () => {
  it('a chosen Python that cannot run the trainer', async (t) => {
    const store = path.join(tempDir(t), 'store.db');
    await assert.rejects(
      findPython(store, '/nonexistent/python3'),
      (error) =>
        unavailable(error) && /--python \/nonexistent\/python3 cannot run the trainer/.test((error as Error).message),
    );
    await assert.rejects(
      findPython(store, undefined, { LIGHTNING_PYTHON: '/nonexistent/python3', PATH: '' }),
      unavailable,
    );
  });

  it('a worker that cannot start, and one whose Python has no torch', async (t) => {
    await assert.rejects(
      TrainerWorker.start({ python: '/nonexistent/python3', logger: silentLogger }),
      (error) => unavailable(error) && /cannot start the trainer worker/.test((error as Error).message),
    );
    // A Python stand-in that fails the way python3 does without torch.
    const python = path.join(tempDir(t), 'python3');
    fs.writeFileSync(
      python,
      `#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho "ModuleNotFoundError: No module named 'torch'" >&2\nexit 1\n`,
      { mode: 0o755 },
    );
    await assert.rejects(
      TrainerWorker.start({ python, logger: silentLogger }),
      (error) => unavailable(error) && /has no PyTorch/.test((error as Error).message),
    );
    // Any other crash before the ready line stays the worker's own error, with its traceback.
    const crashing = path.join(tempDir(t), 'python3-crash');
    fs.writeFileSync(crashing, `#!/bin/sh\necho 'ValueError: bad' >&2\nexit 1\n`, { mode: 0o755 });
    await assert.rejects(
      TrainerWorker.start({ python: crashing, logger: silentLogger }),
      (error) =>
        !unavailable(error) && /exited before it was ready[\s\S]*ValueError: bad/.test((error as Error).message),
    );
  });
});
