// needs: venv
/**
 * `lightning checkpoints export` with real parts: a LoRA checkpoint of a tiny Qwen2 (its weights saved with
 * `save_pretrained`, as a downloaded model's are) made by the trainer worker's session on the test venv, exported
 * without a daemon (the CLI on the store) as a PEFT adapter and through the daemon's RPC as a merged model; both loaded
 * by the stock libraries alone in an isolated Python, answering the same logits.
 * trainer-daemon/python/tests/test_export.py checks each format's logprobs against the served checkpoint's.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

function venvPython(): string {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    python,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt',
  );
  return python;
}

test('lightning checkpoints export writes a PEFT adapter and a merged model that the stock libraries load', async (t) => {
  const cwd = tempDir(t);
  const python = venvPython();
  const base = path.join(cwd, 'qwen2');
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const dir = path.join(cwd, '.lightning', 'checkpoints', 'r', '1');
  // One Python for the fixture (each start imports transformers: slow on a busy machine): a tiny Qwen2 with its
  // weights written by save_pretrained, as a downloaded model's folder is, and a LoRA checkpoint of it made by the
  // worker's own session (two updates, saved as `save` writes it).
  execFileSync(
    python,
    [
      '-c',
      [
        'import sys, torch, transformers',
        'from pathlib import Path',
        `sys.path.insert(0, ${JSON.stringify(path.join(REPO_ROOT, 'trainer-daemon', 'python'))})`,
        'from lightning_trainer.bench import tiny_hf_model_dir',
        `folder = tiny_hf_model_dir(Path(${JSON.stringify(base)}))`,
        'torch.manual_seed(0)',
        'transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder)).save_pretrained(folder)',
        'from lightning_trainer.params import LoadParams, SaveParams, TrainParams',
        'from lightning_trainer.schema import parse',
        'from lightning_trainer.session import Session',
        's = Session(lambda _: None)',
        's.load(parse(LoadParams, {"model": {"kind": "hf", "name": folder}, "adapter": {"kind": "lora", "rank": 4}, "device": "cpu"}))',
        'p = s.policy.render_prompt([{"role": "user", "content": "hi there"}], None)',
        'for _ in range(2): s.train(parse(TrainParams, {"transitions": [{"promptIds": p, "responseIds": [5 + i, 9, 3], "advantage": 1.0 if i % 2 else -1.0} for i in range(4)], "epochs": 1}))',
        `s.save(parse(SaveParams, {"dir": ${JSON.stringify(dir)}}))`,
      ].join('\n'),
    ],
    { stdio: 'pipe', env: { ...process.env, OPENBLAS_NUM_THREADS: '1' } },
  );
  const store = Store.open(storeFile);
  const model = { kind: 'hf' as const, name: base };
  const grpo = GrpoConfig.parse({ model, dataset: 'd', device: 'cpu', python, command: { argv: ['agent'], cwd } });
  const id = store.recordTrainingStep(
    store.recordTrainingRun({ algorithm: 'grpo', config: grpo }).id,
    1,
    {},
    { dir, metrics: {} },
  )!.id;
  store.close();

  // Without a daemon: the CLI runs the same handler on the store; the run's Python does the export.
  const peft = await runCli(
    ['checkpoints', 'export', id, '--format', 'peft', '--out', 'exports/adapter', '--store', storeFile, '--json'],
    { cwd },
  );
  assert.equal(peft.code, 0, peft.stderr);
  const adapter = JSON.parse(peft.stdout) as {
    path: string;
    format: string;
    files: string[];
    baseModel: string;
    bytes: number;
  };
  assert.deepEqual(
    [adapter.path, adapter.format, adapter.baseModel],
    [path.join(cwd, 'exports', 'adapter'), 'peft', base],
  );
  assert.ok(
    ['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json'].every((f) => adapter.files.includes(f)),
    adapter.files.join(', '),
  );

  // Through the daemon: the same, over RPC.
  const daemon = await startDaemon(storeFile, []);
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  const merged = await client.request('exportCheckpoint', {
    id,
    format: 'merged',
    out: path.join(cwd, 'exports', 'merged'),
  });
  assert.ok(
    merged.files.includes('model.safetensors') && merged.files.includes('config.json'),
    merged.files.join(', '),
  );
  assert.equal(merged.baseModel, null);

  // Stock libraries only (-I: no project code, no PYTHONPATH): both load and answer the same logits.
  const check = [
    'import sys, torch, transformers, peft',
    'base, adapter, merged = sys.argv[1:4]',
    'assert "lightning_trainer" not in sys.modules',
    'a = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), adapter).eval()',
    'm = transformers.AutoModelForCausalLM.from_pretrained(merged).eval()',
    'tok = transformers.AutoTokenizer.from_pretrained(merged)',
    'ids = torch.tensor([tok.apply_chat_template([{"role": "user", "content": "hi there"}], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]])',
    'with torch.no_grad(): d = (a(input_ids=ids).logits - m(input_ids=ids).logits).abs().max().item()',
    'print(d)',
  ].join('\n');
  const out = execFileSync(python, ['-I', '-c', check, base, adapter.path, merged.path], {
    cwd: path.join(cwd, 'exports'),
    encoding: 'utf8',
    env: { PATH: '/usr/bin:/bin', HF_HUB_OFFLINE: '1' },
  });
  assert.ok(Number(out.trim().split('\n').at(-1)) < 1e-4, out);
});
