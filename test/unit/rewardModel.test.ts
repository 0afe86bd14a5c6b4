import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RewardModel } from '../../trainer-daemon/rewards/rewardModel';
import { Tokenizer } from '../../trainer-daemon/rewards/tokenizer';
import { tempDir } from '../helpers/tmp';

const FIXTURE = path.join(__dirname, '..', 'fixtures', 'reward-model');
/** Scores computed by build.py with numpy from the same weights and its own tokenization. */
const EXPECTED = JSON.parse(fs.readFileSync(path.join(FIXTURE, 'expected.json'), 'utf8')) as Array<{
  text: string;
  score: number;
}>;

function writeTokenizer(dir: string, config: object): string {
  const file = path.join(dir, `tokenizer-${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(config));
  return file;
}

describe('ONNX reward model (onnxruntime-node, CPU)', () => {
  test('scores match the independently computed values, one at a time and in padded batches', async (t) => {
    const model = await RewardModel.load(path.join(FIXTURE, 'model.onnx'), path.join(FIXTURE, 'tokenizer.json'), {
      device: 'cpu',
    });
    t.after(() => model.dispose());
    assert.equal(model.device, 'cpu');
    for (const batchSize of [1, 3, 32]) {
      const scores = await model.score(
        EXPECTED.map((e) => e.text),
        batchSize,
      );
      scores.forEach((score, i) =>
        assert.ok(
          Math.abs(score - EXPECTED[i]!.score) < 1e-5,
          `batch ${batchSize}, ${JSON.stringify(EXPECTED[i]!.text)}: ${score} vs ${EXPECTED[i]!.score}`,
        ),
      );
    }
  });

  test('device auto runs on CUDA when onnxruntime-node’s CUDA binaries are installed, else on CPU; cuda without them is a clear error', async (t) => {
    const files = [path.join(FIXTURE, 'model.onnx'), path.join(FIXTURE, 'tokenizer.json')] as const;
    const auto = await RewardModel.load(...files, { device: 'auto' });
    t.after(() => auto.dispose());
    const [score] = await auto.score([EXPECTED[0]!.text], 1);
    assert.ok(Math.abs(score! - EXPECTED[0]!.score) < 1e-5, `${auto.device}: ${score}`);
    if (auto.device === 'cpu')
      await assert.rejects(
        RewardModel.load(...files, { device: 'cuda' }),
        /device "cuda": onnxruntime-node's CUDA binaries are not installed/,
      );
  });

  test('the char-level tokenizer: lower case, one id per character, [CLS] … [SEP], unknown characters, truncation', () => {
    const tokenizer = Tokenizer.load(path.join(FIXTURE, 'tokenizer.json'));
    const vocab = (
      JSON.parse(fs.readFileSync(path.join(FIXTURE, 'tokenizer.json'), 'utf8')) as {
        model: { vocab: Record<string, number> };
      }
    ).model.vocab;
    assert.deepEqual(tokenizer.encode('Ab?').ids, [vocab['[CLS]'], vocab.a, vocab.b, vocab['?'], vocab['[SEP]']]);
    assert.deepEqual(tokenizer.encode('é').ids, [vocab['[CLS]'], vocab['[UNK]'], vocab['[SEP]']]);
    assert.equal(tokenizer.encode('x'.repeat(500)).ids.length, 64);
  });

  test('a WordPiece tokenizer (BERT-style) splits words greedily into known pieces', (t) => {
    const file = writeTokenizer(tempDir(t), {
      normalizer: { type: 'BertNormalizer', lowercase: true },
      pre_tokenizer: { type: 'BertPreTokenizer' },
      post_processor: { type: 'BertProcessing', cls: ['[CLS]', 101], sep: ['[SEP]', 102] },
      model: {
        type: 'WordPiece',
        unk_token: '[UNK]',
        continuing_subword_prefix: '##',
        vocab: { '[UNK]': 100, '[CLS]': 101, '[SEP]': 102, un: 1, '##believ': 2, '##able': 3, '!': 4, cafe: 5 },
      },
    });
    assert.deepEqual(Tokenizer.load(file).encode('Unbelievable! Café xyz').ids, [101, 1, 2, 3, 4, 5, 100, 102]);
  });

  test('unsupported tokenizers and missing models are refused with errors naming what is wrong', async (t) => {
    const dir = tempDir(t);
    const bpe = writeTokenizer(dir, { model: { type: 'BPE', vocab: {}, merges: [] } });
    assert.throws(() => Tokenizer.load(bpe), /model type BPE is not supported/);
    const unigram = writeTokenizer(dir, { model: { type: 'Unigram', vocab: [['a', 0]] } });
    assert.throws(() => Tokenizer.load(unigram), /model type Unigram is not supported/);
    const byteLevel = writeTokenizer(dir, {
      pre_tokenizer: { type: 'ByteLevel' },
      model: { type: 'WordLevel', vocab: { a: 0 }, unk_token: 'a' },
    });
    assert.throws(() => Tokenizer.load(byteLevel), /pre_tokenizer type ByteLevel is not supported/);
    assert.throws(() => Tokenizer.load(writeTokenizer(dir, { nothing: true })), /model/);
    await assert.rejects(
      RewardModel.load(path.join(dir, 'missing.onnx'), path.join(FIXTURE, 'tokenizer.json'), { device: 'cpu' }),
      /reward model .*missing\.onnx does not exist/,
    );
    const notOnnx = path.join(dir, 'bad.onnx');
    fs.writeFileSync(notOnnx, 'not a model');
    await assert.rejects(
      RewardModel.load(notOnnx, path.join(FIXTURE, 'tokenizer.json'), { device: 'cpu' }),
      /cannot load reward model .*bad\.onnx on cpu/,
    );
  });
});
