/**
 * What APO asks its critique and edit models. A critique is a "textual gradient": given the prompt
 * and rollouts that went badly (and some that went well), say what in the prompt to change. The
 * edit applies it and returns the whole new prompt between <prompt> tags, placeholders intact.
 */
import { placeholders, type CritiqueStyle, type Json } from '../protocol';
import { LightningError } from '../protocol/errors';
import { assertNever } from '../protocol/assert';
import type { ChatMessage } from './llm';

/** One rollout shown to the critique model. */
export interface Example {
  readonly input: Json;
  readonly answer: string | null;
  readonly expected: Json | null;
  readonly reward: number;
}

export const CRITIQUE_SYSTEM =
  'You critique prompts for an AI agent. You are shown the prompt and rollouts of the agent with their rewards (higher is better).';
export const EDIT_SYSTEM =
  'You edit prompts for an AI agent. You are given a prompt and a critique of it; you write the improved prompt.';

function styleInstruction(style: CritiqueStyle): string {
  switch (style) {
    case 'failures':
      return 'Explain why the prompt led to the low-reward rollouts, and say what instruction the prompt lacks.';
    case 'contrast':
      return 'Contrast the low-reward rollouts with the high-reward ones: what should the prompt say so that the former behave like the latter?';
    case 'rules':
      return 'List, as short imperative rules, what the prompt must add or change to fix the low-reward rollouts.';
    default:
      return assertNever(style);
  }
}

/** Long inputs and answers are cut, so a critique request stays a bounded size. */
const MAX_EXAMPLE_CHARS = 2_000;
const cut = (text: string): string =>
  text.length > MAX_EXAMPLE_CHARS ? `${text.slice(0, MAX_EXAMPLE_CHARS)} […]` : text;

function describe(example: Example, index: number): string {
  const lines = [
    `Example ${index + 1} (reward ${example.reward}):`,
    `input: ${cut(JSON.stringify(example.input))}`,
    `agent's answer: ${cut(example.answer ?? '(none)')}`,
  ];
  if (example.expected !== null) lines.push(`expected answer: ${JSON.stringify(example.expected)}`);
  return lines.join('\n');
}

export function critiqueMessages(
  prompt: string,
  low: readonly Example[],
  high: readonly Example[],
  style: CritiqueStyle,
): ChatMessage[] {
  const sections = [
    `<prompt>\n${prompt}\n</prompt>`,
    `Low-reward rollouts:\n${low.map(describe).join('\n\n') || '(none)'}`,
    `High-reward rollouts:\n${high.map(describe).join('\n\n') || '(none)'}`,
    `Critique style: ${style}. ${styleInstruction(style)} Answer with the critique only.`,
  ];
  return [
    { role: 'system', content: CRITIQUE_SYSTEM },
    { role: 'user', content: sections.join('\n\n') },
  ];
}

export function editMessages(prompt: string, critique: string): ChatMessage[] {
  const names = placeholders(prompt);
  const keep = names.length
    ? `Keep every placeholder exactly as written (${names.map((n) => `{${n}}`).join(', ')}) and add no new ones.`
    : 'Add no {placeholders}.';
  return [
    { role: 'system', content: EDIT_SYSTEM },
    {
      role: 'user',
      content: `<prompt>\n${prompt}\n</prompt>\n\n<critique>\n${critique}\n</critique>\n\nWrite the improved prompt. ${keep} Answer with the whole new prompt between <prompt> and </prompt>.`,
    },
  ];
}

/** The critique text; an error (retried) when it is empty. */
export function parseCritique(answer: string): string {
  const critique = answer.trim();
  if (!critique) throw new LightningError('the critique was empty');
  return critique;
}

/**
 * The new prompt from an edit answer: the text between <prompt> tags. Refused (so the edit is
 * asked again) when the tags are missing, when it is empty or unchanged, or when it drops or adds
 * a placeholder.
 */
export function parseEdit(answer: string, parent: string): string {
  const match = /<prompt>\n?([\s\S]*?)\n?<\/prompt>/.exec(answer);
  if (!match) throw new LightningError('the edit did not put the new prompt between <prompt> and </prompt>');
  const prompt = match[1]!.trim();
  if (!prompt) throw new LightningError('the edit returned an empty prompt');
  if (prompt === parent.trim()) throw new LightningError('the edit returned the prompt unchanged');
  const want = placeholders(parent);
  const got = placeholders(prompt);
  const dropped = want.filter((name) => !got.includes(name));
  const added = got.filter((name) => !want.includes(name));
  if (dropped.length || added.length) {
    const what = [
      dropped.length ? `dropped {${dropped.join('}, {')}}` : '',
      added.length ? `added {${added.join('}, {')}}` : '',
    ]
      .filter(Boolean)
      .join(' and ');
    throw new LightningError(`the edit ${what}; placeholders must be kept`);
  }
  return prompt;
}
