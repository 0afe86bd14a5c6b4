/**
 * A reader for Hugging Face `tokenizer.json` files, enough for small reward models without Python
 * or native tokenizers. Supported: models WordLevel and WordPiece; normalizers Lowercase, NFC/NFD/
 * NFKC/NFKD, Strip, StripAccents, BertNormalizer and Sequence; pre-tokenizers Whitespace,
 * WhitespaceSplit, BertPreTokenizer, Split (Isolated/Removed; a one-character regex `.` gives a
 * char-level tokenizer) and Sequence; TemplateProcessing / BertProcessing post-processors;
 * truncation and padding settings. BPE and Unigram models (GPT-2, Llama, DeBERTa tokenizers) are
 * refused with an error naming the type.
 */
import { parseJsonText, readFileBounded } from '../util/readFileBounded';
import { z } from 'zod';
import { describeIssues } from '../protocol';
import { InvalidInputError } from '../protocol/errors';

const Node = z.looseObject({ type: z.string() });
type Node = z.infer<typeof Node>;

const TokenizerFile = z.looseObject({
  added_tokens: z.array(z.looseObject({ id: z.number().int(), content: z.string() })).default([]),
  normalizer: Node.nullable().default(null),
  pre_tokenizer: Node.nullable().default(null),
  post_processor: Node.nullable().default(null),
  truncation: z.looseObject({ max_length: z.number().int().positive() }).nullable().default(null),
  padding: z.looseObject({ pad_id: z.number().int().nonnegative() }).nullable().default(null),
  model: z.looseObject({
    type: z.string().optional(),
    vocab: z.record(z.string(), z.number().int().nonnegative()).or(z.array(z.unknown())),
    unk_token: z.string().nullish(),
    continuing_subword_prefix: z.string().nullish(),
    max_input_chars_per_word: z.number().int().positive().nullish(),
  }),
});

export interface Encoding {
  readonly ids: number[];
}

type Normalize = (text: string) => string;
type PreTokenize = (pieces: string[]) => string[];

const stripAccents = (text: string): string => text.normalize('NFD').replace(/\p{Mn}/gu, '');

function unsupported(what: string, type: string): never {
  throw new InvalidInputError(
    `tokenizer.json: ${what} type ${type} is not supported (supported: see docs/rewards.md, "Reward models")`,
  );
}

function normalizerOf(node: Node | null): Normalize {
  if (!node) return (text) => text;
  switch (node.type) {
    case 'Lowercase':
      return (text) => text.toLowerCase();
    case 'NFC':
    case 'NFD':
    case 'NFKC':
    case 'NFKD':
      return (text) => text.normalize(node.type as 'NFC');
    case 'Strip':
      return (text) => text.trim();
    case 'StripAccents':
      return stripAccents;
    case 'BertNormalizer': {
      const lowercase = node.lowercase !== false;
      const strip = node.strip_accents === true || (node.strip_accents == null && lowercase);
      return (text) => {
        // BERT's normaliser drops NUL and replacement characters and maps other control characters to spaces.
        // eslint-disable-next-line no-control-regex
        let out = text.replace(/[\u0000\ufffd\p{Cc}]/gu, (c) => (/\s/.test(c) ? ' ' : ''));
        if (node.handle_chinese_chars !== false) out = out.replace(/[\u4e00-\u9fff\u3400-\u4dbf]/g, (c) => ` ${c} `);
        if (lowercase) out = out.toLowerCase();
        return strip ? stripAccents(out) : out;
      };
    }
    case 'Sequence': {
      const steps = (node.normalizers as Node[]).map(normalizerOf);
      return (text) => steps.reduce((acc, step) => step(acc), text);
    }
    default:
      return unsupported('normalizer', node.type);
  }
}

/** Splits by a regex: matches kept as their own pieces (`Isolated`) or dropped (`Removed`). */
function splitBy(regex: RegExp, keepMatches: boolean): PreTokenize {
  return (pieces) =>
    pieces.flatMap((piece) => {
      const out: string[] = [];
      let last = 0;
      for (const m of piece.matchAll(regex)) {
        if (m.index > last) out.push(piece.slice(last, m.index));
        if (keepMatches && m[0] !== '') out.push(m[0]);
        last = m.index + m[0].length;
      }
      if (last < piece.length) out.push(piece.slice(last));
      return out;
    });
}

function preTokenizerOf(node: Node | null): PreTokenize {
  if (!node) return (pieces) => pieces;
  switch (node.type) {
    case 'Whitespace':
      return (pieces) => pieces.flatMap((piece) => piece.match(/\w+|[^\w\s]+/gu) ?? []);
    case 'WhitespaceSplit':
      return (pieces) => pieces.flatMap((piece) => piece.split(/\s+/).filter(Boolean));
    case 'BertPreTokenizer':
      return (pieces) => pieces.flatMap((piece) => piece.match(/[^\s\p{P}]+|\p{P}/gu) ?? []);
    case 'Split': {
      const pattern = node.pattern as { String?: string; Regex?: string };
      const source = pattern.Regex ?? (pattern.String ?? '').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      if (node.behavior !== 'Isolated' && node.behavior !== 'Removed')
        unsupported('Split behavior', String(node.behavior));
      if (node.invert === true) unsupported('Split', 'with invert');
      return splitBy(new RegExp(source, 'gu'), node.behavior === 'Isolated');
    }
    case 'Sequence': {
      const steps = (node.pretokenizers as Node[]).map(preTokenizerOf);
      return (pieces) => steps.reduce((acc, step) => step(acc), pieces);
    }
    default:
      return unsupported('pre_tokenizer', node.type);
  }
}

/** What a tokenizer.json describes, as the tokenizer runs it. */
interface TokenizerParts {
  readonly vocab: ReadonlyMap<string, number>;
  readonly unkId: number | undefined;
  /** WordPiece's prefix for word continuations (`##`); undefined for WordLevel. */
  readonly subwordPrefix: string | undefined;
  readonly normalize: Normalize;
  readonly preTokenize: PreTokenize;
  /** The special tokens around a single sequence. */
  readonly prefixIds: readonly number[];
  readonly suffixIds: readonly number[];
  readonly maxLength: number;
  readonly padId: number;
}

export class Tokenizer {
  private constructor(private readonly parts: TokenizerParts) {}

  /** Token ids per encoding at most, special tokens included. */
  get maxLength(): number {
    return this.parts.maxLength;
  }

  get padId(): number {
    return this.parts.padId;
  }

  static load(file: string): Tokenizer {
    // Hugging Face tokenizer.json files run to a few tens of MB.
    const raw = parseJsonText(readFileBounded(file, 256 * 1024 * 1024, 'tokenizer'), `tokenizer ${file}`);
    const parsed = TokenizerFile.safeParse(raw);
    if (!parsed.success) throw new InvalidInputError(`tokenizer ${file}: ${describeIssues(parsed.error, '')}`);
    const config = parsed.data;
    const type = config.model.type ?? 'unknown';
    if (type !== 'WordLevel' && type !== 'WordPiece') unsupported('model', type);
    if (Array.isArray(config.model.vocab)) unsupported('model', `${type} with a list vocabulary`);
    const vocab = new Map(Object.entries(config.model.vocab));
    for (const token of config.added_tokens) vocab.set(token.content, token.id);
    const unk = config.model.unk_token ? vocab.get(config.model.unk_token) : undefined;
    const [prefix, suffix] = templateIds(config.post_processor, vocab);
    return new Tokenizer({
      vocab,
      unkId: unk,
      subwordPrefix: type === 'WordPiece' ? (config.model.continuing_subword_prefix ?? '##') : undefined,
      normalize: normalizerOf(config.normalizer),
      preTokenize: preTokenizerOf(config.pre_tokenizer),
      prefixIds: prefix,
      suffixIds: suffix,
      maxLength: config.truncation?.max_length ?? 512,
      padId: config.padding?.pad_id ?? vocab.get('[PAD]') ?? vocab.get('<pad>') ?? 0,
    });
  }

  /** Token ids of `text`, special tokens added and truncated to maxLength. */
  encode(text: string): Encoding {
    const words = this.parts.preTokenize([this.parts.normalize(text)]);
    const ids = words.flatMap((word) => this.wordIds(word));
    const room = Math.max(0, this.maxLength - this.parts.prefixIds.length - this.parts.suffixIds.length);
    return { ids: [...this.parts.prefixIds, ...ids.slice(0, room), ...this.parts.suffixIds] };
  }

  private wordIds(word: string): number[] {
    const id = this.parts.vocab.get(word);
    if (this.parts.subwordPrefix === undefined || id !== undefined) return id !== undefined ? [id] : this.unk(word);
    // WordPiece: greedy longest match first; a word with an unknown piece is one unknown token.
    const ids: number[] = [];
    for (let start = 0; start < word.length;) {
      let end = word.length;
      let found: number | undefined;
      for (; end > start; end -= 1) {
        found = this.parts.vocab.get((start > 0 ? this.parts.subwordPrefix : '') + word.slice(start, end));
        if (found !== undefined) break;
      }
      if (found === undefined) return this.unk(word);
      ids.push(found);
      start = end;
    }
    return ids;
  }

  private unk(word: string): number[] {
    if (this.parts.unkId === undefined)
      throw new InvalidInputError(`tokenizer.json has no unk_token and the vocabulary lacks ${JSON.stringify(word)}`);
    return [this.parts.unkId];
  }
}

/** The special tokens a post-processor puts before and after a single sequence. */
function templateIds(node: Node | null, vocab: ReadonlyMap<string, number>): [number[], number[]] {
  if (!node) return [[], []];
  const idOf = (token: string): number => {
    const id = vocab.get(token);
    if (id === undefined)
      throw new InvalidInputError(`tokenizer.json: special token ${token} is not in the vocabulary`);
    return id;
  };
  switch (node.type) {
    case 'TemplateProcessing': {
      const single = node.single as Array<{ SpecialToken?: { id: string }; Sequence?: unknown }>;
      const at = single.findIndex((piece) => piece.Sequence !== undefined);
      const special = (pieces: typeof single): number[] =>
        pieces.flatMap((piece) => (piece.SpecialToken ? [idOf(piece.SpecialToken.id)] : []));
      return [special(single.slice(0, at)), special(single.slice(at + 1))];
    }
    case 'BertProcessing':
    case 'RobertaProcessing': {
      const [cls, sep] = [(node.cls as [string, number])[1], (node.sep as [string, number])[1]];
      return [[cls], [sep]];
    }
    default:
      return unsupported('post_processor', node.type);
  }
}
