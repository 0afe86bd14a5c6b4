"""The clipped policy-gradient loss per token and its aggregation over a micro-batch (train.py's docstring).

TRL's GRPOTrainer computes the same (tests/test_trl_parity.py checks loss and gradients against its own code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Totals:
    """What a micro-batch's share of the minibatch loss is normalised by. Counted over the whole micro-batch or
    minibatch, so that under torchrun, where each rank holds a slice of every micro-batch, the slices' shares add
    up to the one-process loss: the same on every rank, whatever the slice."""

    tokens: float  # the minibatch's masked tokens (dapo)
    micro_batches: int  # in the minibatch
    max_length: int  # dr_grpo's divisor per sequence
    rows: Optional[int] = None  # the micro-batch's sequences (grpo, dr_grpo); None: the rows of `values`
    micro_tokens: Optional[float] = None  # the micro-batch's masked tokens (bnpo); None: those of `mask`


def aggregate(values: torch.Tensor, mask: torch.Tensor, loss_type: str, totals: Totals) -> torch.Tensor:
    """This micro-batch's share of the minibatch loss: summed over micro-batches (and ranks) it is the loss."""
    micro_batches = max(totals.micro_batches, 1)
    rows = values.shape[0] if totals.rows is None else totals.rows
    if loss_type == "grpo":
        per_sequence = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.sum() / max(rows, 1) / micro_batches
    if loss_type == "bnpo":
        if totals.micro_tokens is None:
            return (values * mask).sum() / mask.sum().clamp(min=1.0) / micro_batches
        return (values * mask).sum() / max(totals.micro_tokens, 1.0) / micro_batches
    if loss_type == "dr_grpo":
        return (values * mask).sum() / (max(rows, 1) * totals.max_length) / micro_batches
    if loss_type == "dapo":
        return (values * mask).sum() / max(totals.tokens, 1.0)
    raise ValueError(f"unknown lossType {loss_type!r} (grpo, bnpo, dr_grpo, dapo)")


def clipped_pg(
    logprobs: torch.Tensor,
    behaviour: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    clip_high: Optional[float] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token loss, ratio and whether the clipped branch was taken (ratio bounds 1 - clip, 1 + clip_high)."""
    ratio = (logprobs - behaviour).exp()
    unclipped = ratio * advantages[:, None]
    clipped = ratio.clamp(1 - clip, 1 + (clip if clip_high is None else clip_high)) * advantages[:, None]
    return -torch.minimum(unclipped, clipped), ratio, (clipped < unclipped)


def k3_kl(logprobs: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    delta = reference - logprobs
    return delta.exp() - delta - 1
