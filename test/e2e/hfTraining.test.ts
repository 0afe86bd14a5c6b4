// needs: venv
/**
 * A Hugging Face model from the palette, end to end, in a real VS Code (code-server + chromium): a tiny Qwen2 saved
 * in the workspace with `save_pretrained`, as a user's downloaded model is, is trained with **Lightning: Start
 * Training** (GRPO, "Hugging Face model…" typed as the local folder, LoRA by default) for 2 iterations by the test
 * venv's PyTorch 2 + transformers + peft; then **Use** on its newest checkpoint serves it (the status bar says so) and
 * **Export** writes it as a merged model into the workspace, which a separate, isolated Python loads with stock
 * transformers alone. Then Start Training's **Policies** offers the names the dataset's rollouts went by (the agent's
 * baggage name and its model), and the one picked trains a LoRA adapter of its own. Screenshots go to
 * test-results/e2e/hf-*.png.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FrameLocator, Page } from 'playwright-core';
import type { Checkpoint, TrainingRunSummary } from '../../trainer-daemon/protocol';
import { answerInputBox, pickQuickItem, pickQuickLabel, runCommand } from '../helpers/codeServer';
import { runCli } from '../helpers/daemon';
import { startE2eSession, type E2eSession } from '../helpers/e2eSession';
import { saveTinyQwen, venvPython } from '../helpers/tinyHf';
import { prepareTrainingWorkspace, TRAINING_AGENT } from '../helpers/trainingWorkspace';

describe(
  'A Hugging Face model from the palette (code-server + chromium): train with LoRA, Use Checkpoint, Export',
  { concurrency: false, timeout: 600_000 },
  () => {
    let session: E2eSession;
    let page: Page;
    let panel: FrameLocator;
    let model: string;
    let runId: string;

    before(async () => {
      // The extension's daemon finds the trainer's Python as `lightning train` does: LIGHTNING_PYTHON first.
      process.env.LIGHTNING_PYTHON = venvPython();
      session = await startE2eSession({}, async (workspace, storeFile) => {
        await prepareTrainingWorkspace(workspace, storeFile);
        model = path.join(workspace, 'models', 'tiny-qwen2');
        saveTinyQwen(venvPython(), model);
      });
      ({ page, panel } = session);
    });

    after(async () => {
      delete process.env.LIGHTNING_PYTHON;
      await session?.close('extension-hf');
    });

    const toast = (text: string | RegExp) =>
      page.locator('.notifications-toasts .notification-toast', { hasText: text }).first();

    it('Start Training on the local model folder: GRPO with LoRA, 2 iterations, checkpoints', async () => {
      await runCommand(page, 'Lightning: Start Training');
      await pickQuickItem(page, 'GRPO');
      await pickQuickItem(page, 'Hugging Face model…');
      await answerInputBox(page, 'Hugging Face model', model);
      await pickQuickItem(page, '3 train · 2 val tasks');
      await pickQuickLabel(page, TRAINING_AGENT);
      for (const [label, value] of [
        ['Iterations', '2'],
        ['Samples per task', '2'],
      ] as const) {
        await pickQuickLabel(page, label);
        await answerInputBox(page, `Start Training: ${label}`, value);
      }
      await pickQuickLabel(page, 'Start training');
      const detail = panel.locator('.run-detail');
      // The header names the run by what it trains (runLabel); its id is on the detail.
      await detail.locator('.run-header .run-title', { hasText: /^GRPO / }).waitFor({ timeout: 60_000 });
      runId = (await detail.getAttribute('data-run-id'))!;
      await toast(new RegExp(`training run ${runId} finished after 2 iteration`)).waitFor({ timeout: 420_000 });
      const listed = await runCli(['train', '--list', '--json', '--store', session.storeFile]);
      const run = (JSON.parse(listed.stdout) as TrainingRunSummary[]).find((item) => item.id === runId)!;
      assert.equal(run.status, 'succeeded', run.error ?? '');
      assert.deepEqual(run.algorithm === 'grpo' && run.config.model, { kind: 'hf', name: model });
      await detail.locator('.checkpoint-row').first().waitFor({ timeout: 30_000 });
      await session.shot('hf-1-trained');
    });

    it('Use on the newest checkpoint serves the LoRA policy; Export writes a merged model stock transformers loads', async () => {
      const detail = panel.locator('.run-detail');
      const newest = detail.locator('.checkpoint-row').first();
      assert.match((await newest.innerText()).trim(), /^iteration 2/);
      await newest.locator('.use-checkpoint').click();
      await page.locator('.statusbar-item', { hasText: 'step 2' }).waitFor({ timeout: 180_000 });
      await session.shot('hf-2-in-use');

      await newest.locator('.export-checkpoint').click();
      await pickQuickItem(page, 'Merged model');
      // The folder dialog opens on the workspace folder: accept it; the export goes into a new subfolder there.
      const dialog = page.locator('.quick-input-widget', {
        has: page.locator('.quick-input-title', { hasText: 'the folder to export into' }),
      });
      await dialog.waitFor({ timeout: 30_000 });
      await dialog.locator('.quick-input-box input').press('Enter');
      await toast(/exported step 2 as Merged model/).waitFor({ timeout: 240_000 });
      await session.shot('hf-3-exported');
      const out = path.join(session.workspace, `${runId}-step2-merged`);
      const files = fs.readdirSync(out);
      for (const file of ['config.json', 'model.safetensors', 'generation_config.json', 'tokenizer.json'])
        assert.ok(files.includes(file), `${file} in ${files.join(', ')}`);
      const loaded = spawnSync(
        venvPython(),
        [
          '-I',
          '-c',
          [
            'import sys, torch, transformers',
            'model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])',
            'tokenizer = transformers.AutoTokenizer.from_pretrained(sys.argv[1])',
            'text = tokenizer.apply_chat_template([{"role": "user", "content": "3 plus 4"}], add_generation_prompt=True, tokenize=False)',
            'ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids',
            'logits = model(input_ids=ids).logits',
            'assert torch.isfinite(logits).all()',
            'print(type(model).__name__, ids.shape[1])',
          ].join('\n'),
          out,
        ],
        {
          cwd: session.workspace,
          encoding: 'utf8',
          timeout: 120_000,
          env: { PATH: '/usr/bin:/bin', HF_HUB_OFFLINE: '1' },
        },
      );
      assert.equal(loaded.status, 0, loaded.stderr);
      assert.match(loaded.stdout, /^Qwen2ForCausalLM \d+/);
    });

    it("Policies offers the agent names and models of the dataset's rollouts; the picked one trains an adapter of its own", async () => {
      await runCommand(page, 'Lightning: Start Training');
      await pickQuickItem(page, 'GRPO');
      await pickQuickLabel(page, model);
      await pickQuickItem(page, '3 train · 2 val tasks');
      await pickQuickLabel(page, TRAINING_AGENT);
      await pickQuickLabel(page, 'Policies');
      // The first run's rollouts: the agent named itself "digits" in its baggage and asked for the model tools-policy.
      const offered = page.locator('.quick-input-widget .quick-input-list .monaco-list-row');
      await offered.filter({ hasText: 'tools-policy' }).first().waitFor({ timeout: 15_000 });
      assert.match(
        await offered.filter({ hasText: 'digits' }).first().innerText(),
        /agent · \d+ calls in \d+ rollouts/,
      );
      await pickQuickItem(page, 'digits');
      await page.locator('.quick-input-widget .quick-input-box input').press('Enter');
      await page
        .locator('.quick-input-widget .monaco-list-row', { hasText: 'digits (one LoRA adapter each)' })
        .waitFor({ timeout: 15_000 });
      await pickQuickLabel(page, 'Iterations');
      await answerInputBox(page, 'Start Training: Iterations', '1');
      await pickQuickLabel(page, 'Start training');
      // The panel opens on the new run; the toast says when it ends.
      const opened = panel.locator(`.run-detail:not([data-run-id="${runId}"])`);
      await opened.waitFor({ timeout: 60_000 });
      const policyRunId = (await opened.getAttribute('data-run-id'))!;
      await toast(new RegExp(`training run ${policyRunId} (finished|cancelled|failed)`)).waitFor({ timeout: 420_000 });
      const runs = await runCli(['train', '--list', '--json', '--store', session.storeFile]);
      const policyRun = (JSON.parse(runs.stdout) as TrainingRunSummary[]).find((item) => item.id === policyRunId)!;
      assert.equal(policyRun.status, 'succeeded', policyRun.error ?? '');
      assert.deepEqual(policyRun.algorithm === 'grpo' && policyRun.config.policies.map((p) => [p.name, p.match]), [
        ['digits', '^digits$'],
      ]);
      // Its checkpoints are the digits adapter's: checkpoints/<run>/<step>/digits.
      const listed = await runCli(['checkpoints', '--run', policyRun.id, '--json', '--store', session.storeFile]);
      const mine = (JSON.parse(listed.stdout) as { items: Checkpoint[] }).items;
      assert.ok(mine.length > 0 && mine.every((c) => path.basename(c.path) === 'digits'), listed.stdout);
      await session.shot('hf-4-policies');
    });
  },
);
