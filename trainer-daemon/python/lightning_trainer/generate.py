"""Batched sampling with a KV cache over left-padded prompts, recording each token's logprob.

Serving puts every waiting request (and each of its `n` choices) in one batch. Logprobs are those of the policy
itself (temperature 1, no top-p), i.e. the behaviour logprobs the clipped objective needs; temperature and top_p
only shape the sampling distribution.
"""

from __future__ import annotations

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


@dataclass
class Generated:
    ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"
    stop_text: Optional[str] = None  # the text up to (not including) a matched stop string
    top: list[list[tuple[int, float]]] = field(default_factory=list)


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


def _sample(logits: torch.Tensor, settings: list[Sampling], generators: list[torch.Generator]) -> torch.Tensor:
    chosen = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    for i, (s, generator) in enumerate(zip(settings, generators)):
        if s.temperature <= 0:
            chosen[i] = logits[i].argmax()
            continue
        probs = (logits[i] / s.temperature).softmax(dim=-1)
        if s.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < s.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        chosen[i] = torch.multinomial(probs, 1, generator=generator)[0]
    return chosen


def _stop_text(policy: Policy, ids: list[int], stops: list[str]) -> Optional[str]:
    """The text before the first stop string, once one has appeared (only the tail is decoded per step)."""
    if not stops:
        return None
    tail = policy.decode(ids[-4 * max(len(s) for s in stops) - 4 :])
    if not any(s and s in tail for s in stops):
        return None
    text = policy.decode(ids)
    cuts = [text.index(s) for s in stops if s and s in text]
    return text[: min(cuts)] if cuts else None


@torch.no_grad()
def generate(policy: Policy, prompts: list[list[int]], settings: list[Sampling]) -> list[Generated]:
    """Sample a completion per prompt; a row ends at a stop token (kept in ids), a stop string, or max_tokens."""
    device = policy.device
    limits = [
        s.max_tokens if policy.context is None else min(s.max_tokens, policy.context - len(p))
        for p, s in zip(prompts, settings)
    ]
    generators = [_generator(s.seed, device) for s in settings]
    ids, mask, positions = left_pad(prompts, policy.pad_id, device)
    logits, past = policy.forward(ids, mask, positions, keep=1)
    results = [Generated([], [], "length") for _ in prompts]
    done = [limit <= 0 for limit in limits]
    next_position = positions[:, -1]
    while not all(done):
        last = logits[:, -1].float()
        if not bool(torch.isfinite(last).all()):  # before softmax/multinomial, which would hit a device-side assert
            raise NonFiniteError(
                "the model produced non-finite logits (NaN/inf) while sampling: its weights or "
                "activations have diverged"
            )
        logprobs = last.log_softmax(dim=-1)
        chosen = _sample(last, settings, generators)
        chosen_logprobs = logprobs.gather(1, chosen[:, None])[:, 0].tolist()
        chosen_list = chosen.tolist()
        for i, result in enumerate(results):
            if done[i]:
                chosen_list[i] = policy.pad_id
                continue
            result.ids.append(chosen_list[i])
            result.logprobs.append(chosen_logprobs[i])
            if settings[i].top_logprobs:
                values, indices = logprobs[i].topk(settings[i].top_logprobs)
                result.top.append(list(zip(indices.tolist(), values.tolist())))
            if chosen_list[i] in policy.stop_ids:
                result.finish_reason, done[i] = "stop", True
            elif (cut := _stop_text(policy, result.ids, settings[i].stop)) is not None:
                result.finish_reason, result.stop_text, done[i] = "stop", cut, True
            elif len(result.ids) >= limits[i]:
                done[i] = True
        if all(done):
            break
        live = torch.tensor([0 if d else 1 for d in done], dtype=mask.dtype, device=device)
        mask = torch.cat([mask, live[:, None]], dim=1)
        next_position = next_position + live
        step_ids = torch.tensor(chosen_list, dtype=torch.long, device=device)[:, None]
        logits, past = policy.forward(step_ids, mask, next_position[:, None], past=past, keep=1)
    return results
