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
loss. The KL to the reference is measured whatever klCoef (reported as `kl`): on every row when it is in the loss,
otherwise on every KL_SAMPLE_STRIDE-th row (an estimate that spares most of the reference pass).

What an update costs beyond the bare forward + backward + optimizer step (the bench prints the breakdown): the
reference pass (all rows with klCoef > 0, a sample otherwise), behaviour logprobs the batch lacks (free for the first
minibatch's rows: its training forward comes before any step), and a snapshot of the trainable weights and optimizer
state (tensor clones) that a failed call restores. Per-row data lives in right-aligned device tensors built once;
metrics stay on the device until the end.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from .generate import NonFiniteError, left_pad
from .loss import Totals, aggregate, clipped_pg, k3_kl
from .params import TrainParams, Transition
from .policy import Policy

__all__ = ["Totals", "aggregate", "clipped_pg", "k3_kl", "policy_update", "sequence_logprobs"]

Progress = Callable[[dict], None]

# With klCoef 0 the KL is only reported, not trained on: the reference pass runs on every KL_SAMPLE_STRIDE-th row of
# the batch (at least one), an unbiased estimate of the token-mean KL for a fraction of the reference's cost.
KL_SAMPLE_STRIDE = 8


@dataclass
class TokenLogprobs:
    logprobs: torch.Tensor  # (batch, longest response), responses right-aligned
    entropy: Optional[torch.Tensor]
    valid: torch.Tensor  # 1 where a response token sits


def sequence_logprobs(
    policy: Policy,
    prompts: list[list[int]],
    responses: list[list[int]],
    module=None,
    entropy: bool = False,
    entropy_grad: bool = True,
) -> TokenLogprobs:
    """logp of each response token given its prompt, in one left-padded forward pass; with `entropy` also each
    position's entropy (without a gradient unless `entropy_grad`: a metric need not be differentiated)."""
    longest = max(len(r) for r in responses)
    ids, mask, positions = left_pad([p + r for p, r in zip(prompts, responses)], policy.pad_id, policy.device)
    logits, _ = policy.forward(ids, mask, positions, keep=longest + 1, module=module)
    logits = logits[:, :-1].float()
    targets = ids[:, -longest:]
    normalizer = logits.logsumexp(dim=-1)
    logprobs = logits.gather(-1, targets[..., None])[..., 0] - normalizer
    lengths = torch.tensor([len(r) for r in responses], device=policy.device)
    valid = (torch.arange(longest, device=policy.device)[None, :] >= longest - lengths[:, None]).float()
    token_entropy = None
    if entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            token_entropy = normalizer - (logits.softmax(dim=-1) * logits).sum(dim=-1)
    return TokenLogprobs(logprobs, token_entropy, valid)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@torch.no_grad()
def _fill_logprobs(policy: Policy, transitions: list[Transition], micro_batch: int, module=None) -> list[list[float]]:
    out = []
    for chunk in _chunks(transitions, micro_batch):
        result = sequence_logprobs(policy, [t.prompt_ids for t in chunk], [t.response_ids for t in chunk], module)
        rows = result.logprobs.tolist()  # one copy off the device for the whole chunk
        out.extend(row[len(row) - len(t.response_ids) :] for row, t in zip(rows, chunk))
    return out


class Stats:
    """Token-weighted sums of the update's metrics, kept on the device (one copy to the host at the end)."""

    NAMES = ("pg", "kl", "entropy", "clipped", "tokens", "klTokens")

    def __init__(self, device: torch.device):
        self.sums = {name: torch.zeros((), dtype=torch.float64, device=device) for name in self.NAMES}

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        self.sums[name] += (values.detach().float() * mask).sum()

    def count(self, name: str, mask: torch.Tensor) -> None:
        self.sums[name] += mask.sum()

    def totals(self, reducer: Optional[Reducer]) -> dict[str, float]:
        sums = dict(zip(self.NAMES, torch.stack([self.sums[n] for n in self.NAMES]).tolist()))
        return {name: reducer.total(value) for name, value in sums.items()} if reducer is not None else sums


def _check_vocab(policy: Policy, transitions: list[Transition]) -> None:
    vocab = policy.vocab_size
    for i, t in enumerate(transitions):
        ids = t.prompt_ids + t.response_ids
        if ids and (min(ids) < 0 or max(ids) >= vocab):
            raise ValueError(f"transitions[{i}] has token ids outside the vocabulary [0, {vocab})")
        if policy.context is not None and len(ids) > policy.context:
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


class _Snapshot:
    """Copies of tensors, to put back after a failed call. Plain tensors are copied into one flat buffer per (device,
    dtype): a few copy kernels, where a clone each is a kernel launch and an allocation per tensor — on a GPU the
    snapshot's whole cost. Others (an FSDP-sharded DTensor) are cloned one by one."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.shapes = [tensor.shape for tensor in tensors]
        self.clones: dict[int, torch.Tensor] = {}
        groups: dict[tuple, list[int]] = {}
        for i, tensor in enumerate(tensors):
            if type(tensor) is torch.Tensor:
                groups.setdefault((tensor.device, tensor.dtype), []).append(i)
            else:
                self.clones[i] = tensor.clone()
        self.flats = [(indices, torch.cat([tensors[i].reshape(-1) for i in indices])) for indices in groups.values()]

    def copies(self) -> list[torch.Tensor]:
        """The copies, in the order given: each a tensor of its own (not a view of the flat buffer)."""
        out = dict(self.clones)
        for indices, flat in self.flats:
            for i, part in zip(indices, flat.split([self.shapes[i].numel() for i in indices])):
                out[i] = part.view(self.shapes[i]).clone()
        return [out[i] for i in range(len(self.shapes))]


@contextlib.contextmanager
def unchanged_on_error(trainable: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer):
    """A call that fails part-way (a non-finite step, OOM) leaves the weights and optimizer state as they were.
    The snapshot is copies of the tensors (_Snapshot; no deepcopy of the state dict: its Python walk cost more)."""
    with torch.no_grad():
        held = [(p, name) for p, s in optimizer.state.items() for name, v in s.items() if torch.is_tensor(v)]
        snapshot = _Snapshot([p.detach() for p in trainable] + [optimizer.state[p][name].detach() for p, name in held])
    state = {p: dict(s) for p, s in optimizer.state.items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    try:
        yield
    except BaseException:
        with torch.no_grad():
            copies = snapshot.copies()
            for p, copy in zip(trainable, copies):
                p.copy_(copy)
            for (p, name), copy in zip(held, copies[len(trainable) :]):
                state[p][name] = copy
        optimizer.state.clear()
        optimizer.state.update(state)
        for group, saved_group in zip(optimizer.param_groups, groups):
            group.update(saved_group)
        raise


def phase_clock(device: torch.device) -> Callable[[], float]:
    """What an update's phases are timed with: on CUDA wall seconds (each phase synchronised), on the CPU the
    process's CPU seconds, which a loaded machine's other work does not inflate (the bench runs one thread)."""
    return time.perf_counter if device.type == "cuda" else time.process_time


class Phases:
    """Seconds spent in each phase of an update, for the bench's breakdown (bench.py). Off unless the caller passes
    a dict to fill: timing a CUDA phase needs a device synchronisation, which an update should not pay for."""

    def __init__(self, out: Optional[dict], device: torch.device):
        self.out, self.cuda, self.clock = out, device.type == "cuda", phase_clock(device)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.out is None:
            yield
            return
        if self.cuda:
            torch.cuda.synchronize()
        started = self.clock()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize()
            self.out[name] = self.out.get(name, 0.0) + self.clock() - started


class Batch:
    """The update's transitions as right-aligned tensors on the device, built once: response masks, behaviour
    logprobs (0 where missing), which rows have reference logprobs, and advantages. A micro-batch takes rows and
    its own width (its longest response) from them, without per-row copies."""

    def __init__(self, transitions: list[Transition], device: torch.device):
        self.width = max(len(t.response_ids) for t in transitions)
        self.device = device
        self.mask = self._aligned([t.mask or [1] * len(t.response_ids) for t in transitions])
        self.behaviour = self._aligned([t.logprobs or [] for t in transitions])
        self.reference = torch.zeros_like(self.behaviour)
        self.has_reference = torch.zeros(len(transitions), dtype=torch.bool, device=device)
        self.advantages = torch.tensor([t.advantage for t in transitions], dtype=torch.float32, device=device)
        self.tokens = self.mask.sum(dim=1).tolist()  # per row, on the host (the loss's normalisers)

    def _aligned(self, rows: list[list[float]]) -> torch.Tensor:
        padded = [[0.0] * (self.width - len(row)) + [float(x) for x in row] for row in rows]
        return torch.tensor(padded, dtype=torch.float32).to(self.device)

    def fill(self, target: torch.Tensor, values: dict[int, list[float]]) -> None:
        if values:
            rows = list(values)
            target[rows] = self._aligned([values[i] for i in rows])

    def rows(self, target: torch.Tensor, rows: list[int], width: int) -> torch.Tensor:
        return target[rows][:, self.width - width :]


class Update:
    """The minibatch loop of policy_update: each minibatch's micro-batches forward and backward, then one step."""

    def __init__(self, policy: Policy, optimizer, params: TrainParams, batch: Batch, reducer, timer: Phases):
        self.policy, self.optimizer, self.params, self.batch = policy, optimizer, params, batch
        self.reducer, self.timer = reducer, timer
        self.rank, self.world = (reducer.rank, reducer.world) if reducer is not None else (0, 1)
        self.trainable = list(policy.trainable().values())
        self.max_length = params.max_response_length or max(len(t.response_ids) for t in params.transitions)
        self.stats = Stats(policy.device)
        self.losses: list[float] = []
        self.grad_norm = 0.0  # the largest (pre-clip) gradient norm of the call
        self.max_deviation: Optional[float] = None  # max |ratio - 1| on the first minibatch
        self.pending: set[int] = set()  # rows whose behaviour logprobs come from their first training forward

    def minibatch(self, rows: list[int], grad_clip: float, where: str) -> None:
        micros = _chunks(rows, self.params.micro_batch)
        tokens = float(sum(self.batch.tokens[i] for i in rows))
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=self.policy.device)
        for micro in micros:
            totals = Totals(
                tokens,
                len(micros),
                self.max_length,
                rows=len(micro),
                micro_tokens=float(sum(self.batch.tokens[i] for i in micro)),
            )
            loss = loss + self._micro(micro, totals)
        with self.timer("step"):
            if self.reducer is not None:
                self.reducer.gradients(self.trainable)
                total = self.reducer.total(float(loss))
            else:
                total = float(loss)
            norm = checked_step(self.optimizer, self.trainable, grad_clip, total, where)
        self.grad_norm = max(self.grad_norm, norm)
        self.losses.append(total)

    def _micro(self, micro: list[int], totals: Totals) -> torch.Tensor:
        """Forward and backward of this rank's slice of a micro-batch; its loss share (detached)."""
        params, batch, policy = self.params, self.batch, self.policy
        mine = micro[self.rank :: self.world]
        silent = not mine  # fewer rows than ranks: a loss-free row keeps this rank's passes in step
        if silent:
            mine = micro[:1]
        chunk = [params.transitions[i] for i in mine]
        with self.timer("forward"):
            result = sequence_logprobs(
                policy,
                [t.prompt_ids for t in chunk],
                [t.response_ids for t in chunk],
                entropy=True,
                entropy_grad=params.entropy_coef > 0,
            )
            width = result.logprobs.shape[1]
            mask = batch.rows(batch.mask, mine, width) * (0.0 if silent else 1.0)
            current = result.logprobs.detach()
            valid = result.valid > 0
            fresh = [k for k, i in enumerate(mine) if i in self.pending]
            if fresh:  # the policy's own logprobs before any step: this forward's
                rows = [mine[k] for k in fresh]
                batch.behaviour[rows, batch.width - width :] = torch.where(valid[fresh], current[fresh], 0.0)
                self.pending.difference_update(rows)
            # Padding positions get ratio 1 and KL 0, whatever sits there (no overflow to meet a 0 mask).
            behaviour = torch.where(valid, batch.rows(batch.behaviour, mine, width), current)
            reference = torch.where(valid, batch.rows(batch.reference, mine, width), current)
            kl_mask = mask * batch.has_reference[mine][:, None]
            advantages = batch.advantages[mine]
            pg, ratio, clipped = clipped_pg(result.logprobs, behaviour, advantages, params.clip, params.clip_high)
            per_token = pg
            kl = k3_kl(result.logprobs, reference)
            if params.kl_coef > 0:
                per_token = per_token + params.kl_coef * (kl * ratio if params.kl_bias_correction else kl)
            loss = aggregate(per_token, mask, params.loss_type, totals)
            if params.entropy_coef > 0:
                loss = loss - params.entropy_coef * aggregate(result.entropy, mask, "bnpo", totals)
        with self.timer("backward"):
            loss.backward()
        stats = self.stats
        stats.add("pg", pg, mask)
        stats.add("kl", kl, kl_mask)
        stats.count("klTokens", kl_mask)
        stats.add("entropy", result.entropy, mask)
        stats.add("clipped", clipped.float(), mask)
        stats.count("tokens", mask)
        if not self.losses:  # the first minibatch, before any step
            deviation = float(((ratio.detach() - 1).abs() * mask).max())
            self.max_deviation = deviation if self.max_deviation is None else max(self.max_deviation, deviation)
        return loss.detach()


def policy_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    grad_clip: float,
    params: TrainParams,
    progress: Progress,
    reducer: Optional[Reducer] = None,
    phases: Optional[dict] = None,
) -> dict:
    """One training step on a batch of transitions: `epochs` passes over shuffled minibatches.

    With a reducer (torchrun), every rank holds the whole batch and draws the same minibatches and micro-batches as
    one process would; each rank runs every world-th row of each micro-batch (a rank whose slice is empty runs one
    row with mask 0: no loss, no gradient, but the same forward passes everywhere). Each slice's loss is normalised
    by its micro-batch's or minibatch's counts (Totals) and gradients are summed across ranks, so the update is the
    one-process update, for every lossType and batch size. `phases`, when given, gets the seconds of each phase."""
    started = time.perf_counter()
    timer = Phases(phases, policy.device)
    transitions = params.transitions
    with timer("prepare"):
        _check_vocab(policy, transitions)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        generator = torch.Generator().manual_seed(params.seed)
        orders = [torch.randperm(len(transitions), generator=generator).tolist() for _ in range(params.epochs)]
        batch = Batch(transitions, policy.device)
    if policy.model.training:  # a walk over every module: only when needed (the worker keeps it in eval)
        policy.model.eval()
    # Missing behaviour logprobs are the current policy's: those of the first minibatch's rows come for free from
    # its training forward (no step has been taken yet; one process, no dropout, so the same numbers), the
    # others' need a pass before any step.
    missing = [i for i, t in enumerate(transitions) if t.logprobs is None]
    free = set(orders[0][: params.minibatch]) if reducer is None and policy.training_is_deterministic() else set()
    with timer("behaviour"):
        ahead = [i for i in missing if i not in free]
        batch.fill(batch.behaviour, _spread_logprobs(policy, transitions, ahead, params.micro_batch, reducer))
    # The KL term needs every row's reference logprobs; with klCoef 0 the KL is only reported, from every
    # KL_SAMPLE_STRIDE-th row, on the updates that ask (klSample): the others skip the reference forward.
    if params.kl_coef > 0:
        sampled = list(range(len(transitions)))
    else:
        sampled = list(range(0, len(transitions), KL_SAMPLE_STRIDE)) if params.kl_sample else []
    if sampled:
        with timer("reference"):
            with policy.reference() as reference:
                references = _spread_logprobs(
                    policy, transitions, sampled, params.micro_batch, reducer, module=reference
                )
            batch.fill(batch.reference, references)
            batch.has_reference[list(references)] = True
    policy.model.train()
    update = Update(policy, optimizer, params, batch, reducer, timer)
    update.pending = {i for i in missing if i in free}
    for epoch, order in enumerate(orders):
        for minibatch in _chunks(order, params.minibatch):
            update.minibatch(minibatch, grad_clip, f"epoch {epoch}, minibatch {len(update.losses) + 1}")
            progress({"phase": "train", "epoch": epoch, "minibatch": len(update.losses), "loss": update.losses[-1]})
    policy.model.eval()
    sums = update.stats.totals(reducer)
    max_deviation = update.max_deviation
    if reducer is not None:
        max_deviation = reducer.maximum(max_deviation or 0.0)
    tokens = max(sums["tokens"], 1.0)
    result = {
        "loss": sum(update.losses) / len(update.losses),
        "pgLoss": sums["pg"] / tokens,
        "entropy": sums["entropy"] / tokens,
        "clipFraction": sums["clipped"] / tokens,
        "maxRatioDeviation": max_deviation,
        "gradNorm": update.grad_norm,
        "tokens": int(sum(len(t.response_ids) for t in transitions)),
        "seconds": time.perf_counter() - started,
    }
    if sums["klTokens"] > 0:  # not measured on this update (klSample false): no KL, rather than a 0 it never saw
        result["kl"] = sums["kl"] / sums["klTokens"]
    if torch.cuda.is_available():
        result["gpuMemoryBytes"] = int(torch.cuda.max_memory_allocated())
    return result


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
