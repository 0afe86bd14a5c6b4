"""Batched sampling with a KV cache over left-padded prompts, recording each token's logprob.

A Decoder holds the rows being decoded together and their KV cache: rows join between steps (their prompts are
prefilled together, then their cache is left-padded to the batch's width and appended) and leave as soon as they
finish (a stop token, a stop string, their max_tokens), so a finished row costs nothing and a new one need not wait
for the batch to end — the serving engine (serve.py) is continuous batching on it, and `generate()` is the same
Decoder given all its rows at once. Each row keeps its own sampling settings and seeded generator, and its own
positions (cumsum(mask) - 1), so its tokens are those it would get decoded alone (up to float rounding of the
batched matmuls). The sampled rows of a step are drawn together (`_sample`: the draw torch.multinomial makes, with
each row's noise from its own generator), so a step's sampling is a few batched ops and one noise fill per row.
Logprobs are those of the policy itself (temperature 1, no top-p), i.e. the behaviour logprobs the clipped objective
needs; temperature and top_p only shape the sampling distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from .policy import Policy


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: Optional[int] = None
    top_logprobs: int = 0
    # Several policies: the adapter this row decodes with (None: the base model); ignored with one policy.
    adapter: Optional[str] = None


@dataclass
class Generated:
    ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"
    stop_text: Optional[str] = None  # the text up to (not including) a matched stop string
    stop_string: Optional[str] = None  # which stop string ended it (the first in the text)
    top: list[list[tuple[int, float]]] = field(default_factory=list)


def finish_reason(out: Generated, calls: list) -> str:
    """A chat choice's finish_reason: "tool_calls" for an answer that ended after its calls; one cut at max_tokens
    says "length" even when a call parses from what it holds (as OpenAI's API does), so the agent and the record
    see that the answer was cut, not a whole call."""
    return "tool_calls" if calls and out.finish_reason == "stop" else out.finish_reason


class NonFiniteError(RuntimeError):
    """The model produced NaN/inf (logits while sampling, or gradients in an update)."""


def left_pad(
    rows: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask and position ids (cumsum(mask) - 1) for right-aligned rows."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def _sample(logits: torch.Tensor, rows: list[Row]) -> torch.Tensor:
    """One token per row: greedy rows by one argmax over the batch; the sampled rows all together. A sampled row's
    token is what torch.multinomial(probs, 1, generator) draws — argmax(probs / E) for E exponential noise from the
    row's own generator — so the tokens of a seed are those of one row sampled alone; only the noise is drawn row by
    row (one fill each), the temperature, top-p cut, division and argmax are batched ops whatever the number of rows."""
    chosen = logits.argmax(dim=-1)
    sampled = [i for i, row in enumerate(rows) if row.settings.temperature > 0]
    if not sampled:
        return chosen
    device = logits.device
    every = len(sampled) == len(rows)
    index = None if every else torch.tensor(sampled, device=device)
    settings = [rows[i].settings for i in sampled]
    temperature = torch.tensor([s.temperature for s in settings], dtype=logits.dtype, device=device)
    probs = ((logits if every else logits[index]) / temperature[:, None]).softmax(dim=-1)
    if any(s.top_p < 1.0 for s in settings):
        # Nucleus: the most likely tokens whose mass before them is under top_p (rows without a top_p keep all).
        top_p = torch.tensor([s.top_p if s.top_p < 1.0 else math.inf for s in settings], device=device)
        ordered, order = probs.sort(dim=-1, descending=True)
        kept = ordered * ((ordered.cumsum(dim=-1) - ordered) < top_p[:, None])
        probs = torch.zeros_like(probs).scatter_(1, order, kept)
    noise = torch.empty_like(probs)
    for k, i in enumerate(sampled):
        noise[k].exponential_(1, generator=rows[i].generator)
    picks = (probs / noise).argmax(dim=-1)
    if every:
        return picks
    chosen[index] = picks
    return chosen


def _stop_text(policy: Policy, ids: list[int], stops: list[str]) -> Optional[tuple[str, str]]:
    """The text before the first stop string and that string, once one has appeared (only the tail is decoded per
    step)."""
    if not stops:
        return None
    tail = policy.decode(ids[-4 * max(len(s) for s in stops) - 4 :])
    if not any(s and s in tail for s in stops):
        return None
    text = policy.decode(ids)
    cuts = [(text.index(s), s) for s in stops if s and s in text]
    if not cuts:
        return None
    at, stop = min(cuts, key=lambda cut: cut[0])
    return text[:at], stop


@dataclass
class Row:
    """One completion being decoded: its settings, token limit, generator and what it has produced so far."""

    settings: Sampling
    limit: int
    generator: torch.Generator
    result: Generated = field(default_factory=lambda: Generated([], [], "length"))
    done: bool = False


def _pad_left(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """`tensor` with zeros prepended along `dim` up to `width`."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _adapters(policy: Policy, rows: list[Row]) -> Optional[list[Optional[str]]]:
    """Each row's adapter for a policy with several (rows of different policies share every step), else None."""
    return [row.settings.adapter for row in rows] if policy.adapters else None


class Decoder:
    """The rows decoded together: per row its Row, attention mask over the cache, next position and last logits."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.rows: list[Row] = []
        self.past: Optional[list] = None  # per layer (keys, values), each (rows, heads, time, head_dim)
        self.mask: Optional[torch.Tensor] = None  # (rows, time), 1 = a real token
        self.positions: Optional[torch.Tensor] = None  # (rows,) position of each row's last token
        self.logits: Optional[torch.Tensor] = None  # (rows, vocab), float32: the next token's distribution

    @torch.no_grad()
    def add(self, prompts: list[list[int]], settings: list[Sampling]) -> list[Row]:
        """Prefill these prompts together and append them to the batch; a row with no room left is done at once."""
        policy, device = self.policy, self.policy.device
        rows = []
        for prompt, s in zip(prompts, settings):
            limit = s.max_tokens if policy.context is None else min(s.max_tokens, policy.context - len(prompt))
            rows.append(Row(s, limit, _generator(s.seed, device), done=limit <= 0))
        live = [i for i, row in enumerate(rows) if not row.done]
        if not live:
            return rows
        ids, mask, positions = left_pad([prompts[i] for i in live], policy.pad_id, device)
        logits, past = policy.forward(ids, mask, positions, keep=1, adapters=_adapters(policy, [rows[i] for i in live]))
        layers = policy.cache_layers(past)
        if self.rows:
            width = max(mask.shape[1], self.mask.shape[1])
            mask = torch.cat([_pad_left(self.mask, width, 1), _pad_left(mask, width, 1)])
            layers = [
                tuple(torch.cat([_pad_left(old, width, 2), _pad_left(new, width, 2)]) for old, new in zip(a, b))
                for a, b in zip(self.policy.cache_layers(self.past), layers)
            ]
            positions = torch.cat([self.positions, positions[:, -1]])
            logits = torch.cat([self.logits, logits[:, -1].float()])
        else:
            positions, logits = positions[:, -1], logits[:, -1].float()
        self.rows = self.rows + [rows[i] for i in live]
        self.past, self.mask, self.positions, self.logits = policy.cache_from_layers(layers), mask, positions, logits
        return rows

    @torch.no_grad()
    def step(self) -> list[Row]:
        """Sample a token for every row; rows that finish leave the batch (returned), the rest run one forward."""
        policy, rows = self.policy, self.rows
        last = self.logits
        if not bool(torch.isfinite(last).all()):  # before softmax/multinomial, which would hit a device-side assert
            raise NonFiniteError(
                "the model produced non-finite logits (NaN/inf) while sampling: its weights or "
                "activations have diverged"
            )
        logprobs = last.log_softmax(dim=-1)
        chosen = _sample(last, rows)
        chosen_logprobs = logprobs.gather(1, chosen[:, None])[:, 0].tolist()
        chosen_list = chosen.tolist()
        for i, row in enumerate(rows):
            result = row.result
            result.ids.append(chosen_list[i])
            result.logprobs.append(chosen_logprobs[i])
            if row.settings.top_logprobs:
                values, indices = logprobs[i].topk(row.settings.top_logprobs)
                result.top.append(list(zip(indices.tolist(), values.tolist())))
            if chosen_list[i] in policy.stop_ids:
                result.finish_reason, row.done = "stop", True
            elif (cut := _stop_text(policy, result.ids, row.settings.stop)) is not None:
                result.finish_reason, row.done = "stop", True
                result.stop_text, result.stop_string = cut
            elif len(result.ids) >= row.limit:
                row.done = True
        finished = [row for row in rows if row.done]
        if len(finished) == len(rows):
            self.clear()
            return finished
        mask, positions, past = self.mask, self.positions, self.past
        if finished:
            keep = torch.tensor([i for i, row in enumerate(rows) if not row.done], device=policy.device)
            chosen, mask, positions = chosen[keep], mask[keep], positions[keep]
            layers = [(k[keep], v[keep]) for k, v in policy.cache_layers(past)]
            # Columns no remaining row attends to (the left padding of rows that left) are dropped.
            first = int(mask.any(dim=0).long().argmax())
            if first:
                mask, layers = mask[:, first:], [(k[:, :, first:], v[:, :, first:]) for k, v in layers]
            past = policy.cache_from_layers(layers)
            self.rows = [row for row in rows if not row.done]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        positions = positions + 1
        adapters = _adapters(policy, self.rows)
        logits, past = policy.forward(chosen[:, None], mask, positions[:, None], past=past, keep=1, adapters=adapters)
        self.past, self.mask, self.positions, self.logits = past, mask, positions, logits[:, -1].float()
        return finished

    def clear(self) -> None:
        self.rows, self.past, self.mask, self.positions, self.logits = [], None, None, None, None


@torch.no_grad()
def generate(policy: Policy, prompts: list[list[int]], settings: list[Sampling]) -> list[Generated]:
    """Sample a completion per prompt; a row ends at a stop token (kept in ids), a stop string, or max_tokens."""
    decoder = Decoder(policy)
    rows = decoder.add(prompts, settings)
    while decoder.rows:
        decoder.step()
    return [row.result for row in rows]
