/** Export Checkpoint's pure parts: the formats offered for a run's adapter kind, and where an export is written. */
import assert from 'node:assert/strict';
import path from 'node:path';
import { it } from 'node:test';
import { exportFolder, formatItems } from '../../extension/checkpoints/exportChoices';
import { CheckpointFormat, ExportCheckpointParams } from '../../trainer-daemon/protocol';

it('LoRA runs are offered the adapter and the merged model; full fine-tunes the model folder', () => {
  assert.deepEqual(
    formatItems('lora').map((item) => item.format),
    ['peft', 'merged'],
  );
  assert.deepEqual(
    formatItems('full').map((item) => item.format),
    ['hf'],
  );
  for (const item of [...formatItems('lora'), ...formatItems('full')])
    assert.ok(CheckpointFormat.safeParse(item.format).success);
});

it('an export goes to <run>-step<N>-<format> inside the folder picked, numbered when taken', () => {
  const taken = new Set(['/out/train-1-step4-peft', '/out/train-1-step4-peft-2']);
  assert.equal(
    exportFolder('/out', { runId: 'train-1', step: 4 }, 'merged', (dir) => taken.has(dir)),
    path.join('/out', 'train-1-step4-merged'),
  );
  assert.equal(
    exportFolder('/out', { runId: 'train-1', step: 4 }, 'peft', (dir) => taken.has(dir)),
    '/out/train-1-step4-peft-3',
  );
});

it('checkpoints/export takes an absolute folder and a known format, naming the field otherwise', () => {
  assert.ok(ExportCheckpointParams.safeParse({ id: 'ckpt-1', format: 'peft', out: '/tmp/a' }).success);
  const relative = ExportCheckpointParams.safeParse({ id: 'ckpt-1', format: 'peft', out: 'a' });
  assert.equal(relative.success, false);
  assert.match(JSON.stringify(relative.error?.issues), /must be an absolute path/);
  // Either platform's absolute form parses (the schema is browser-safe: no node:path); the daemon's own platform
  // decides when it exports (training/exportCheckpoint.ts).
  for (const out of ['C:\\out', 'c:/out', '\\\\server\\share'])
    assert.ok(ExportCheckpointParams.safeParse({ id: 'ckpt-1', format: 'peft', out }).success, out);
  for (const out of ['C:out', './a', '~/a'])
    assert.equal(ExportCheckpointParams.safeParse({ id: 'ckpt-1', format: 'peft', out }).success, false, out);
  assert.equal(ExportCheckpointParams.safeParse({ id: 'ckpt-1', format: 'gguf', out: '/tmp/a' }).success, false);
});
