"""FSDP under torchrun (`load {fsdp: true}`, `lightning train --nproc-per-node N --fsdp`): the policy's parameters,
gradients and optimizer state sharded across the ranks with torch's FSDP2 (`fully_shard` on each transformer block,
then on the root), instead of a full replica per rank.

What runs where (ddp_worker.DistributedSession calls these when its policy is sharded):
* Every forward pass is collective (each rank all-gathers a block's shards), so every rank runs the same number of
  them: missing behaviour logprobs and the reference's are split across ranks in equal rounds, and each rank runs
  its slice of every micro-batch, a loss-free row where the slice is empty (train.policy_update). Full
  fine-tuning's reference is a frozen copy, sharded as well; LoRA's is adapters off with the initial norms, kept as
  shards beside the trained ones.
* FSDP averages gradients over ranks; the loss is already normalized by the global token count, so the reducer
  scales them back to the sum (`ShardedReduce`): the update is the one-process update on the whole batch.
* Serving runs on rank 0 from a full, unsharded copy (`serving`): after each load, update and sft the full weights
  are gathered (collective) into it, as FSDP trainers feed an inference engine. That copy must fit rank 0's device
  (inference needs no gradients or optimizer state: a model that fits for serving but not for training).
* `save` gathers weights and optimizer state (collective) and rank 0 writes the one-process checkpoint format
  (optimizer state keyed by parameter index, in the order of `Policy.trainable()`), loadable by any worker. `load
  {checkpoint}` reads it on every rank (a shared filesystem across machines) before sharding.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from . import checkpoint
from .distributed import AllReduce
from .params import LoadParams, SftParams
from .policy import Policy

MIN_TORCH = "2.6"


def unsupported() -> Optional[str]:
    """Why this torch cannot shard (the message a user sees), or None."""
    try:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict  # noqa: F401
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return (
            f"FSDP (--fsdp) needs torch {MIN_TORCH} or later (torch.distributed.fsdp.fully_shard); this worker's "
            f"torch is {torch.__version__}: point --python at a Python with a newer torch, or train without "
            "--fsdp (one full replica per rank)"
        )
    return None


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of the model's largest ModuleList (TinyGPT.blocks, a Hugging Face model's layers)."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        return []
    return list(max(lists, key=lambda blocks: sum(p.numel() for p in blocks.parameters())))


def shard(module: nn.Module, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    for block in transformer_blocks(module):
        fully_shard(block, mesh=mesh)
    # The root too goes back to its shards after each forward (its default keeps them gathered): while gathered,
    # the module's parameters are the unsharded tensors, and the optimizer, clipping and the reducer must see the
    # sharded ones.
    fully_shard(module, mesh=mesh, reshard_after_forward=True)


def _full_options(**extra):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **extra)


class ShardedReduce(AllReduce):
    """train.Reducer for a sharded policy: FSDP has already reduce-scattered the gradients as a mean over ranks;
    the loss is normalized by the global token count, so the update wants their sum."""

    def __init__(self, device: torch.device, world: int):
        super().__init__(device)
        self.world = world

    def gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        for parameter in parameters:
            if parameter.grad is not None:
                parameter.grad.mul_(self.world)


@dataclasses.dataclass
class Loaded:
    policy: Policy  # sharded, on every rank
    optimizer: torch.optim.Optimizer
    serving: Optional[Policy]  # rank 0's full copy
    step: int
    result: dict


def load(params: LoadParams, device: torch.device, rank: int, world: int) -> Loaded:
    """Build the policy on every rank (same seed: the same weights), restore a checkpoint's weights, shard it."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    from .session import build_policy
    from .train import set_lr

    torch.manual_seed(params.seed)
    policy = build_policy(params, device)
    policy.prepare_reference()
    step = checkpoint.restore_weights(params.checkpoint, policy) if params.checkpoint else 0
    if params.checkpoint and not policy.lora:
        policy.prepare_reference()  # full fine-tuning: the KL is to the policy this run resumed from
    total = sum(p.numel() for p in policy.model.parameters())
    dtype = next(policy.model.parameters()).dtype
    mesh = init_device_mesh(device.type, (world,))
    shard(policy.model, mesh)
    if policy._frozen is not None:
        shard(policy._frozen, mesh)
    current = dict(policy.model.named_parameters())
    policy._initial_extra = {
        n: distribute_tensor(value, current[n].device_mesh, current[n].placements)
        for n, value in policy._initial_extra.items()
    }
    o = params.optimizer
    trainable = policy.trainable()
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=o.lr, weight_decay=o.weight_decay)
    if params.checkpoint and checkpoint.has_optimizer(params.checkpoint):
        saved = checkpoint.read_optimizer(params.checkpoint, torch.device("cpu"))
        set_optimizer_state_dict(policy.model, optimizer, by_name(saved, list(trainable)), options=_full_options())
    set_lr(optimizer, o.lr)
    policy.model.eval()
    serving = None
    if rank == 0:
        torch.manual_seed(params.seed)  # the same initial weights as the sharded policy (frozen ones included)
        serving = build_policy(dataclasses.replace(params, checkpoint=None), device)
        serving.model.eval().requires_grad_(False)
    sync_serving(policy, serving, everything=True)
    result = {
        "parameters": total,
        "trainable": sum(p.numel() for p in trainable.values()),
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "step": step,
        "modelName": policy.name,
    }
    return Loaded(policy, optimizer, serving, step, result)


def sync_serving(policy: Policy, serving: Optional[Policy], everything: bool = False) -> None:
    """Collective: the sharded weights gathered into rank 0's serving copy (the trained ones; `everything`: all)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    full = get_model_state_dict(policy.model, options=_full_options(ignore_frozen_params=not everything))
    if serving is not None:
        with torch.no_grad():
            missing, unexpected = serving.model.load_state_dict(full, strict=False)
        if unexpected or (everything and missing):
            raise RuntimeError(
                f"the serving copy does not match the sharded policy (missing {missing[:3]}, "
                f"unexpected {unexpected[:3]})"
            )


def by_name(state: dict, names: list[str]) -> dict:
    """A one-process optimizer state dict (keyed by parameter index) keyed by parameter name, as FSDP wants it."""
    return {
        "state": {names[i]: value for i, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]],
    }


def by_index(state: dict, names: list[str]) -> dict:
    """The reverse of by_name: the format `torch.optim.Optimizer.state_dict()` writes in one process."""
    index = {name: i for i, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in sorted(state["state"].items(), key=lambda kv: index[kv[0]])},
        "param_groups": [{**group, "params": [index[n] for n in group["params"]]} for group in state["param_groups"]],
    }


def gather_checkpoint(policy: Policy, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Collective: (trainable weights, optimizer state) in the one-process checkpoint format; full on rank 0."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    weights = get_model_state_dict(policy.model, options=_full_options(ignore_frozen_params=True))
    state = get_optimizer_state_dict(policy.model, optimizer, options=_full_options())
    if dist.get_rank() != 0:
        return {}, {}
    names = list(policy.trainable())
    return {n: weights[n] for n in names}, by_index(state, names)


def refresh_reference(policy: Policy) -> None:
    """Full fine-tuning after sft: the frozen sharded reference becomes the current policy (shard by shard)."""
    if policy._frozen is None:
        return
    with torch.no_grad():
        for frozen, current in zip(policy._frozen.parameters(), policy.model.parameters()):
            frozen.copy_(current)


def check_sft(params: SftParams) -> None:
    from .schema import BadParams

    if params.until_sampled_accuracy is not None:
        raise BadParams(
            "params.untilSampledAccuracy is not supported with fsdp (sampling on sharded ranks would "
            "have to stay in lockstep): give a fixed number of steps"
        )
