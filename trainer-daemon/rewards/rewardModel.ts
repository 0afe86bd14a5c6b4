/**
 * A learned reward model scored in the daemon with onnxruntime-node: a sequence-classification
 * model exported to ONNX (inputs `input_ids`, optionally `attention_mask` and `token_type_ids`;
 * first output the logits, [batch, labels]) with its tokenizer.json. Texts are scored in batches,
 * padded to the longest in the batch. CPU by default; `cuda` needs onnxruntime-node's CUDA binaries
 * (installed with `--onnxruntime-node-install=cuda12`); `auto` tries CUDA, then CPU.
 */
import fs from 'node:fs';
import path from 'node:path';
import type * as Ort from 'onnxruntime-node';
import { InvalidInputError } from '../protocol/errors';
import { Tokenizer } from './tokenizer';

/**
 * onnxruntime-node loaded on first use: its native library is large and most runs need no model.
 * It ships N-API binaries for linux x64/arm64, darwin arm64 and win32 only (not darwin x64): where
 * there is none, say so instead of failing inside its loader.
 */
function ort(): typeof Ort {
  const binding = path.join(
    path.dirname(require.resolve('onnxruntime-node/package.json')),
    'bin',
    'napi-v6',
    process.platform,
    process.arch,
    'onnxruntime_binding.node',
  );
  if (!fs.existsSync(binding)) {
    throw new InvalidInputError(
      `ONNX reward models need onnxruntime-node, which ships no binary for ${process.platform}-${process.arch}: ` +
        'score with rules, a reward function or an LLM judge here, or run Lightning on Linux or an Apple Silicon Mac (e.g. over Remote - SSH).',
    );
  }
  // Loaded on first use only: the native runtime costs start-up and is absent on some platforms.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('onnxruntime-node') as typeof Ort;
}

/**
 * Whether onnxruntime-node's CUDA provider library is installed (its installer fetches it on request):
 * checked first, because a failed attempt prints native errors on the daemon's stderr.
 */
function cudaInstalled(): boolean {
  try {
    const bin = path.join(path.dirname(require.resolve('onnxruntime-node/package.json')), 'bin');
    return fs.readdirSync(bin).some((napi) => {
      const dir = path.join(bin, napi, process.platform, process.arch);
      return fs.existsSync(dir) && fs.readdirSync(dir).some((file) => file.includes('providers_cuda'));
    });
  } catch {
    return false;
  }
}

export interface RewardModelOptions {
  readonly device: 'cpu' | 'cuda' | 'auto';
  /** With several labels, the probability of this one (default: the last); with one label, the logit. */
  readonly label?: number;
}

export class RewardModel {
  private constructor(
    private readonly session: Ort.InferenceSession,
    private readonly tokenizer: Tokenizer,
    private readonly options: RewardModelOptions,
    /** The execution provider the session runs on. */
    readonly device: 'cpu' | 'cuda',
  ) {}

  static async load(modelFile: string, tokenizerFile: string, options: RewardModelOptions): Promise<RewardModel> {
    if (!fs.existsSync(modelFile)) throw new InvalidInputError(`reward model ${modelFile} does not exist`);
    const tokenizer = Tokenizer.load(tokenizerFile);
    // Native logs go straight to stderr (the daemon's JSON log stream): only fatal ones, failures come back as errors.
    const create = (provider: 'cpu' | 'cuda'): Promise<Ort.InferenceSession> =>
      ort().InferenceSession.create(modelFile, { executionProviders: [provider], logSeverityLevel: 4 });
    let session: Ort.InferenceSession;
    let device: 'cpu' | 'cuda' =
      options.device === 'cpu' || (options.device === 'auto' && !cudaInstalled()) ? 'cpu' : 'cuda';
    if (options.device === 'cuda' && !cudaInstalled()) {
      throw new InvalidInputError(
        `reward model device "cuda": onnxruntime-node's CUDA binaries are not installed (npm i onnxruntime-node --onnxruntime-node-install=cuda12); or use device "auto" or "cpu"`,
      );
    }
    try {
      session = await create(device);
    } catch (error) {
      if (device === 'cpu' || options.device !== 'auto') {
        throw new InvalidInputError(
          `cannot load reward model ${modelFile} on ${device}: ${(error as Error).message.split('\n')[0]!.slice(0, 300)}`,
        );
      }
      device = 'cpu';
      session = await create(device).catch((cpuError: Error) => {
        throw new InvalidInputError(`cannot load reward model ${modelFile}: ${cpuError.message}`);
      });
    }
    if (!session.inputNames.includes('input_ids')) {
      throw new InvalidInputError(
        `reward model ${modelFile} has no input_ids input (it has ${session.inputNames.join(', ')}); export a sequence-classification model`,
      );
    }
    return new RewardModel(session, tokenizer, options, device);
  }

  /** One score per text, in order, `batchSize` texts per model run. */
  async score(texts: readonly string[], batchSize: number): Promise<number[]> {
    const scores: number[] = [];
    for (let start = 0; start < texts.length; start += batchSize)
      scores.push(...(await this.scoreBatch(texts.slice(start, start + batchSize))));
    return scores;
  }

  private async scoreBatch(texts: readonly string[]): Promise<number[]> {
    const { Tensor } = ort();
    const encoded = texts.map((text) => this.tokenizer.encode(text).ids);
    const length = Math.max(1, ...encoded.map((ids) => ids.length));
    const ids = new BigInt64Array(texts.length * length).fill(BigInt(this.tokenizer.padId));
    const mask = new BigInt64Array(texts.length * length);
    encoded.forEach((row, b) =>
      row.forEach((id, t) => {
        ids[b * length + t] = BigInt(id);
        mask[b * length + t] = 1n;
      }),
    );
    const dims = [texts.length, length];
    const feeds: Record<string, Ort.Tensor> = { input_ids: new Tensor('int64', ids, dims) };
    if (this.session.inputNames.includes('attention_mask')) feeds.attention_mask = new Tensor('int64', mask, dims);
    if (this.session.inputNames.includes('token_type_ids'))
      feeds.token_type_ids = new Tensor('int64', new BigInt64Array(ids.length), dims);
    const outputs = await this.session.run(feeds);
    const logits = outputs[this.session.outputNames[0]!]!;
    const data = Float32Array.from(logits.data as Float32Array);
    const labels = data.length / texts.length;
    return texts.map((_, b) => this.readScore(data.subarray(b * labels, (b + 1) * labels)));
  }

  private readScore(logits: Float32Array): number {
    if (logits.length === 1) return logits[0]!;
    const label = this.options.label ?? logits.length - 1;
    if (label >= logits.length)
      throw new InvalidInputError(`label ${label} is out of range: the reward model has ${logits.length} labels`);
    const max = Math.max(...logits);
    const exps = Array.from(logits, (x) => Math.exp(x - max));
    return exps[label]! / exps.reduce((a, b) => a + b, 0);
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}
