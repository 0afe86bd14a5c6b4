"""Policy updates: the clipped policy-gradient objective (PPO/GRPO style); supervised updates are supervised.py.

Per response token t of a transition with advantage A and behaviour logprob b_t:
    ratio_t = exp(logp_t - b_t),  pg_t = -min(ratio_t·A, clip(ratio_t, 1-ε_low, 1+ε_high)·A)
    kl_t    = exp(ref_t - logp_t) - (ref_t - logp_t) - 1        (k3 estimator, ≥ 0; reference = base policy)
              × ratio_t with klBiasCorrection (TRL's use_bias_correction_kl; on by default, as in TRL 1.13)
    loss    = agg(pg_t + klCoef·kl_t) - entropyCoef·mean(H)   over tokens with mask 1
ε_low = clip, ε_high = clipHigh (default clip; DAPO's clip-higher raises it, e.g. 0.28). `lossType` names agg as
TRL's GRPOTrainer does (tests/test_trl_parity.py checks loss and gradients against TRL's own code):
    grpo     each sequence's token mean, averaged over the sequences of a micro-batch
    bnpo     the token mean of a micro-batch
    dr_grpo  a micro-batch's token sum / (its sequences × maxResponseLength)   (Dr. GRPO: no length bias)
    dapo     token sum / the minibatch's token count                          (exact under gradient accumulation)
grpo, bnpo and dr_grpo then average over the minibatch's micro-batches (TRL: gradient accumulation steps, and
ranks); with micro-batches of equal size grpo is the minibatch's sequence mean. The entropy bonus is, as TRL's,
each micro-batch's token mean of H averaged the same way, whatever lossType. Environment tokens (mask 0) carry no
loss. The KL to the reference is measured whatever klCoef (reported as `kl`).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from .generate import NonFiniteError, left_pad
from .params import TrainParams, Transition
from .policy import Policy

Progress = Callable[[dict], None]


@dataclass
class TokenLogprobs:
    logprobs: torch.Tensor  # (batch, longest response), responses right-aligned
    entropy: Optional[torch.Tensor]
    valid: torch.Tensor  # 1 where a response token sits


def sequence_logprobs(
    policy: Policy, prompts: list[list[int]], responses: list[list[int]], module=None, entropy: bool = False
) -> TokenLogprobs:
    """logp of each response token given its prompt, in one left-padded forward pass."""
    longest = max(len(r) for r in responses)
    ids, mask, positions = left_pad([p + r for p, r in zip(prompts, responses)], policy.pad_id, policy.device)
    logits, _ = policy.forward(ids, mask, positions, keep=longest + 1, module=module)
    logits = logits[:, :-1].float()
    targets = ids[:, -longest:]
    normalizer = logits.logsumexp(dim=-1)
    logprobs = logits.gather(-1, targets[..., None])[..., 0] - normalizer
    valid = torch.zeros_like(targets, dtype=torch.float32)
    for i, response in enumerate(responses):
        valid[i, longest - len(response) :] = 1.0
    token_entropy = None
    if entropy:
        token_entropy = normalizer - (logits.softmax(dim=-1) * logits).sum(dim=-1)
    return TokenLogprobs(logprobs, token_entropy, valid)


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


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _right_aligned(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, width - len(row) :] = torch.tensor(row, dtype=torch.float32)
    return out.to(device)


@torch.no_grad()
def _fill_logprobs(policy: Policy, transitions: list[Transition], micro_batch: int, module=None) -> list[list[float]]:
    out = []
    for chunk in _chunks(transitions, micro_batch):
        result = sequence_logprobs(policy, [t.prompt_ids for t in chunk], [t.response_ids for t in chunk], module)
        for row, t in zip(result.logprobs, chunk):
            out.append(row[len(row) - len(t.response_ids) :].tolist())
    return out


class Stats:
    """Token-weighted sums of the update's metrics."""

    def __init__(self):
        self.sums = {"pg": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0}
        self.tokens = 0.0
        self.losses: list[float] = []
        self.grad_norm = 0.0  # the largest (pre-clip) gradient norm of the call

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        self.sums[name] += float((values.detach().float() * mask).sum())

    def mean(self, name: str) -> float:
        return self.sums[name] / max(self.tokens, 1.0)


def _check_vocab(policy: Policy, transitions: list[Transition]) -> None:
    vocab = policy.vocab_size
    for i, t in enumerate(transitions):
        if any(not 0 <= x < vocab for x in t.prompt_ids + t.response_ids):
            raise ValueError(f"transitions[{i}] has token ids outside the vocabulary [0, {vocab})")
        if policy.context is not None and len(t.prompt_ids) + len(t.response_ids) > policy.context:
            raise ValueError(f"transitions[{i}] is longer than the model's context ({policy.context} tokens)")


class Reducer(Protocol):
    """Collectives across data-parallel ranks (distributed.py); None when training in one process."""

    rank: int
    world: int

    def total(self, value: float) -> float: ...

    def maximum(self, value: float) -> float: ...

    def gather(self, value: dict) -> list[dict]: ...

    def gradients(self, parameters: list[torch.nn.Parameter]) -> None: ...


def _spread_logprobs(
    policy: Policy,
    transitions: list[Transition],
    indices: list[int],
    micro_batch: int,
    reducer: Optional[Reducer],
    module=None,
) -> dict[int, list[float]]:
    """The logprobs of transitions[i] for each i in indices; with a reducer each rank computes every world-th one
    and all of them are gathered on every rank. Every rank runs the same number of forward passes (a rank with
    nothing left repeats a row), as a sharded (FSDP) policy's collective forwards need."""
    if reducer is None:
        return dict(zip(indices, _fill_logprobs(policy, [transitions[i] for i in indices], micro_batch, module)))
    mine = indices[reducer.rank :: reducer.world]
    per_rank = -(-len(indices) // reducer.world)  # ceil(len / world)
    rounds = -(-per_rank // micro_batch)
    rows: dict[int, list[float]] = {}
    for k in range(rounds):
        chunk = mine[k * micro_batch : (k + 1) * micro_batch]
        out = _fill_logprobs(policy, [transitions[i] for i in chunk or indices[:1]], micro_batch, module)
        rows.update(zip(chunk, out))
    return {i: row for part in reducer.gather(rows) for i, row in part.items()}


def checked_step(
    optimizer: torch.optim.Optimizer, trainable: list[torch.nn.Parameter], grad_clip: float, loss: float, where: str
) -> float:
    """Clip and apply one step; a NaN/inf loss or gradient norm raises NonFiniteError instead (nothing applied)."""
    total = torch.nn.utils.clip_grad_norm_(trainable, grad_clip if grad_clip > 0 else math.inf)
    # Sharded gradients (FSDP): the norm is a DTensor, reduced over the ranks only when asked for the whole of it.
    norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
    if not (math.isfinite(loss) and math.isfinite(norm)):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteError(
            f"non-finite update at {where} (loss {loss}, gradient norm {norm}): not applied, the "
            "weights and optimizer state are as before this call"
        )
    optimizer.step()
    return norm


@contextlib.contextmanager
def unchanged_on_error(trainable: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer):
    """A call that fails part-way (a non-finite step, OOM) leaves the weights and optimizer state as they were."""
    weights = [p.detach().clone() for p in trainable]
    state = copy.deepcopy(optimizer.state_dict())
    try:
        yield
    except BaseException:
        with torch.no_grad():
            for p, saved in zip(trainable, weights):
                p.copy_(saved)
        optimizer.load_state_dict(state)
        raise


def policy_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    grad_clip: float,
    params: TrainParams,
    progress: Progress,
    reducer: Optional[Reducer] = None,
) -> dict:
    """One training step on a batch of transitions: `epochs` passes over shuffled minibatches.

    With a reducer (torchrun), every rank holds the whole batch and draws the same minibatches and micro-batches as
    one process would; each rank runs every world-th row of each micro-batch (a rank whose slice is empty runs one
    row with mask 0: no loss, no gradient, but the same forward passes everywhere). Each slice's loss is normalised
    by its micro-batch's or minibatch's counts (Totals) and gradients are summed across ranks, so the update is the
    one-process update, for every lossType and batch size."""
    started = time.perf_counter()
    transitions = params.transitions
    _check_vocab(policy, transitions)
    rank, world = (reducer.rank, reducer.world) if reducer is not None else (0, 1)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    policy.model.eval()
    missing = [i for i, t in enumerate(transitions) if t.logprobs is None]
    behaviour = _spread_logprobs(policy, transitions, missing, params.micro_batch, reducer) if missing else {}
    for i, row in behaviour.items():
        transitions[i].logprobs = row
    # The reference's logprobs, also when klCoef is 0: the KL is always measured and reported.
    with policy.reference() as reference:
        references = _spread_logprobs(
            policy, transitions, list(range(len(transitions))), params.micro_batch, reducer, module=reference
        )
    max_length = params.max_response_length or max(len(t.response_ids) for t in transitions)
    policy.model.train()
    generator = torch.Generator().manual_seed(params.seed)
    stats, max_deviation = Stats(), None
    trainable = list(policy.trainable().values())
    masks = [t.mask or [1] * len(t.response_ids) for t in transitions]
    batches = 0
    for epoch in range(params.epochs):
        order = torch.randperm(len(transitions), generator=generator).tolist()
        for minibatch in _chunks(order, params.minibatch):
            micros = _chunks(minibatch, params.micro_batch)
            tokens = float(sum(sum(masks[i]) for i in minibatch))
            optimizer.zero_grad(set_to_none=True)
            minibatch_loss = 0.0
            for micro in micros:
                totals = Totals(
                    tokens,
                    len(micros),
                    max_length,
                    rows=len(micro),
                    micro_tokens=float(sum(sum(masks[i]) for i in micro)),
                )
                mine = micro[rank::world]
                row_masks = [masks[i] for i in mine]
                if not mine:  # fewer rows than ranks: a loss-free row keeps this rank's passes in step
                    mine, row_masks = micro[:1], [[0] * len(transitions[micro[0]].response_ids)]
                chunk = [transitions[i] for i in mine]
                result = sequence_logprobs(
                    policy, [t.prompt_ids for t in chunk], [t.response_ids for t in chunk], entropy=True
                )
                width = result.logprobs.shape[1]
                mask = _right_aligned(row_masks, width, policy.device)
                behaviour = _right_aligned([t.logprobs for t in chunk], width, policy.device)
                advantages = torch.tensor([t.advantage for t in chunk], dtype=torch.float32, device=policy.device)
                pg, ratio, clipped = clipped_pg(result.logprobs, behaviour, advantages, params.clip, params.clip_high)
                per_token = pg
                kl = k3_kl(result.logprobs, _right_aligned([references[i] for i in mine], width, policy.device))
                stats.add("kl", kl, mask)
                if params.kl_coef > 0:
                    per_token = per_token + params.kl_coef * (kl * ratio if params.kl_bias_correction else kl)
                loss = aggregate(per_token, mask, params.loss_type, totals)
                if params.entropy_coef > 0:
                    loss = loss - params.entropy_coef * aggregate(result.entropy, mask, "bnpo", totals)
                loss.backward()
                minibatch_loss += float(loss.detach())
                stats.add("pg", pg, mask)
                stats.add("entropy", result.entropy, mask)
                stats.add("clipped", clipped.float(), mask)
                stats.tokens += float(mask.sum())
                if batches == 0:
                    deviation = float(((ratio.detach() - 1).abs() * mask).max())
                    max_deviation = deviation if max_deviation is None else max(max_deviation, deviation)
            if reducer is not None:
                reducer.gradients(trainable)
                minibatch_loss = reducer.total(minibatch_loss)
            norm = checked_step(
                optimizer, trainable, grad_clip, minibatch_loss, f"epoch {epoch}, minibatch {batches + 1}"
            )
            stats.grad_norm = max(stats.grad_norm, norm)
            stats.losses.append(minibatch_loss)
            batches += 1
            progress({"phase": "train", "epoch": epoch, "minibatch": batches, "loss": minibatch_loss})
    policy.model.eval()
    if reducer is not None:
        stats.sums = {name: reducer.total(value) for name, value in stats.sums.items()}
        stats.tokens = reducer.total(stats.tokens)
        max_deviation = reducer.maximum(max_deviation or 0.0)
    result = {
        "loss": sum(stats.losses) / len(stats.losses),
        "pgLoss": stats.mean("pg"),
        "kl": stats.mean("kl"),
        "entropy": stats.mean("entropy"),
        "clipFraction": stats.mean("clipped"),
        "maxRatioDeviation": max_deviation,
        "gradNorm": stats.grad_norm,
        "tokens": int(sum(len(t.response_ids) for t in transitions)),
        "seconds": time.perf_counter() - started,
    }
    if torch.cuda.is_available():
        result["gpuMemoryBytes"] = int(torch.cuda.max_memory_allocated())
    return result


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
