"""The trainer worker (PROTOCOL.md) as a torchrun job: data-parallel updates on several processes, GPUs or machines.

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 -m lightning_trainer.ddp_worker
    # several machines: --nnodes M --node_rank I --master_addr HOST --master_port PORT on each (I = 0 where the
    # daemon runs: rank 0 speaks the protocol)

Rank 0 speaks the worker protocol on stdin/stdout exactly as `lightning_trainer.worker` does, and forwards every
request line to the other ranks (torch.distributed's broadcast_object_list), so that every rank holds the same
policy. `train` runs on every rank, each taking every world-th row of the micro-batches one process would draw,
gradients summed by all-reduce (distributed.AllReduce): the update equals the one-process one on the whole batch,
for every lossType and any batch size (train.policy_update). `serve`, `save` and `tokenize` run on rank 0 only:
serving needs one copy (the weights are the same everywhere after each update) and a checkpoint is written once.
`load` and `sft` run on every rank with the same seed and data (deterministic, so the replicas stay equal).
With `load {fsdp: true}` the policy is sharded across the ranks instead of replicated (fsdp.py): every forward is
then collective, rank 0 serves from a full copy gathered after each update, and `save` gathers before rank 0 writes.

A failure inside a collective step on any rank ends that rank (exit 1), and torchrun then stops the others: the
daemon sees the worker crash, with torchrun's summary naming the rank and the host that failed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from collections.abc import Iterator
from typing import TextIO

import torch
import torch.distributed as dist

from . import PROTOCOL_VERSION, checkpoint, fsdp
from .distributed import AllReduce, init_process_group
from .environment import describe
from .params import LoadParams, SaveParams, SftParams, TrainParams
from .session import Session, StateError, pick_device, with_checkpoint_config
from .supervised import supervised
from .train import unchanged_on_error
from .worker import Output, serve_stdio


class DistributedSession(Session):
    """A Session whose `train` is data-parallel and whose serving and saving happen on rank 0 only."""

    def __init__(self, emit, rank: int, world: int):
        super().__init__(emit)
        self.rank, self.world = rank, world
        self.sharded = False
        self.serving = None  # under FSDP: rank 0's full copy of the sharded policy

    @property
    def serving_policy(self):
        return self.serving if self.sharded else self.policy

    def load(self, params: LoadParams) -> dict:
        if not params.fsdp:
            self.sharded, self.serving = False, None
            return super().load(params)
        if params.policies:
            raise StateError(
                "params.policies with params.fsdp: several policies' adapters are replicated on every rank (each "
                "rank holds every adapter); train without --fsdp"
            )
        reason = fsdp.unsupported()
        if reason:
            raise StateError(reason)
        params = with_checkpoint_config(params)
        device = pick_device(params.device)
        if device.type == "cpu":
            torch.set_num_threads(params.threads or 1)
        with self.lock:
            loaded = fsdp.load(params, device, self.rank, self.world)
            self.policy, self.optimizer, self.serving = loaded.policy, loaded.optimizer, loaded.serving
            self.load_params, self.step, self.sharded = params, loaded.step, True
        return loaded.result

    def sft(self, params: SftParams) -> dict:
        if not self.sharded:
            return super().sft(params)
        fsdp.check_sft(params)
        policy = self._loaded()
        with self.lock, unchanged_on_error(list(policy.trainable().values()), self.optimizer):
            result = supervised(policy, self.optimizer, self.load_params.optimizer.grad_clip, params, self._progress)
            if not policy.lora:
                fsdp.refresh_reference(policy)
            fsdp.sync_serving(policy, self.serving)
        return result

    def train(self, params: TrainParams, reducer=None) -> dict:
        # Every rank holds the whole batch (the request was broadcast) and runs its slice of each micro-batch.
        device = self._loaded().device
        reducer = fsdp.ShardedReduce(device, self.world) if self.sharded else AllReduce(device)
        try:
            result = super().train(params, reducer=reducer)
            if self.sharded:
                with self.lock:
                    fsdp.sync_serving(self.policy, self.serving)
        except Exception:
            # The other ranks wait in an all-reduce this rank will never join: end it, torchrun stops the rest.
            sys.stderr.write(
                f"rank {self.rank} on {socket.gethostname()} failed during train:\n{traceback.format_exc()}"
            )
            sys.stderr.flush()
            os._exit(1)
        return {**result, "worldSize": self.world}

    def serve(self, params):
        return super().serve(params) if self.rank == 0 else {}

    def save(self, params: SaveParams) -> dict:
        if not self.sharded:
            return super().save(params) if self.rank == 0 else {}
        with self.lock:
            weights, state = fsdp.gather_checkpoint(self._loaded(), self.optimizer)
            if self.rank != 0:
                return {}
            return checkpoint.write(params.dir, weights, state, self._checkpoint_config(), params.metrics)

    def tokenize(self, params):
        return super().tokenize(params) if self.rank == 0 else {}


def _broadcast(line: str | None) -> str | None:
    box = [line]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _is_shutdown(line: str) -> bool:
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "shutdown"


def forwarded(stdin: TextIO) -> Iterator[str]:
    """Rank 0: each request line, sent to every rank before it is handled here; then None (stdin ended, or
    `shutdown`, which rank 0 alone answers), which ends the other ranks' loops."""
    try:
        for line in stdin:
            if line.strip():
                if not _is_shutdown(line):
                    _broadcast(line)
                yield line
    finally:
        _broadcast(None)


def received() -> Iterator[str]:
    """Other ranks: the lines rank 0 forwards, until it stops."""
    while (line := _broadcast(None)) is not None:
        yield line


def placement(rank: int, world: int) -> list[dict]:
    """Where every rank runs (for the ready line, the panel and `lightning train --list`)."""
    device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    gathered: list = [None] * world
    dist.all_gather_object(
        gathered,
        {
            "rank": rank,
            "localRank": int(os.environ.get("LOCAL_RANK", 0)),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "device": device,
        },
    )
    return gathered


def main() -> None:
    rank, world = init_process_group()
    if rank == 0:
        protocol_out = Output(os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    try:
        ranks = placement(rank, world)
        if rank == 0:
            protocol_out.write(
                {
                    "type": "ready",
                    "protocol": PROTOCOL_VERSION,
                    **describe(),
                    "distributed": {"worldSize": world, "backend": dist.get_backend(), "ranks": ranks},
                }
            )
            lines = forwarded(sys.stdin)
            serve_stdio(lines, protocol_out, lambda emit: DistributedSession(emit, rank, world))
            lines.close()
        else:
            devnull = open(os.devnull, "w")  # noqa: SIM115 (open for the process's life)
            serve_stdio(received(), Output(devnull), lambda emit: DistributedSession(emit, rank, world))
    finally:
        dist.destroy_process_group()
    # Gloo's worker threads can still hold work objects of FSDP's collectives whose tensors would be freed during the
    # interpreter's finalization, which then aborts a rank that ended cleanly (SIGABRT, "terminate called without an
    # active exception", seen in a CI run). Everything is answered and flushed and the group destroyed: leave now.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
