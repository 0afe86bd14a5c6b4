"""Data-parallel policy updates with torch.distributed, launched by torchrun (gloo on CPU, nccl on GPU).

    torchrun --nproc_per_node 2 -m lightning_trainer.distributed \\
        --load load.json --transitions transitions.jsonl --out CHECKPOINT_DIR [--train train.json]

Every rank builds the same policy (load.json: the worker's `load` params, e.g. a checkpoint to resume), reads the
whole batch and runs train.policy_update on its slice of every micro-batch, with gradients summed across ranks by
all-reduce — the same update as one process on the whole batch, for any batch size and lossType. Rank 0 saves the
checkpoint and prints the update's metrics as one JSON line. transitions.jsonl holds the worker's `train`
transitions or the records of `lightning export --format transitions` (promptTokenIds/responseTokenIds/lossMask;
records without token ids are skipped and counted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .params import LoadParams, SaveParams, TrainParams
from .schema import parse
from .session import Session


class AllReduce:
    """train.Reducer over the default process group."""

    def __init__(self, device: torch.device):
        self.device = device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def total(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.SUM)

    def maximum(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.MAX)

    def _reduce(self, value: float, op) -> float:
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return float(tensor.item())

    def gather(self, value: dict) -> list[dict]:
        gathered: list = [None] * self.world
        dist.all_gather_object(gathered, value)
        return gathered

    def gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for parameter, grad in zip(parameters, grads):
            parameter.grad = flat[offset : offset + grad.numel()].view_as(grad).to(grad.dtype)
            offset += grad.numel()


def from_export(record: dict) -> dict | None:
    """A worker transition from either form; None for an export record without token ids."""
    if "promptIds" in record:
        return record
    if not record.get("promptTokenIds") or not record.get("responseTokenIds"):
        return None
    return {
        "promptIds": record["promptTokenIds"],
        "responseIds": record["responseTokenIds"],
        "logprobs": record.get("logprobs"),
        "mask": record.get("lossMask"),
        "advantage": record["advantage"],
    }


def train_all(session: Session, transitions: list[dict], options: dict) -> dict:
    """Every rank gets the whole batch; train.policy_update runs this rank's slice of each micro-batch."""
    params = parse(TrainParams, {**options, "transitions": transitions})
    return session.train(params, reducer=AllReduce(session.policy.device))


def init_process_group() -> tuple[int, int]:
    """RANK/WORLD_SIZE/LOCAL_RANK from torchrun; nccl when this rank has a GPU, else gloo."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return rank, world


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="lightning_trainer.distributed", description=__doc__.split("\n")[0])
    parser.add_argument("--load", required=True, help="JSON file with the worker's load params")
    parser.add_argument("--transitions", required=True, help="JSONL file of transitions")
    parser.add_argument("--out", required=True, help="checkpoint folder to write (rank 0)")
    parser.add_argument("--train", help="JSON file with train options (epochs, minibatch, clip, klCoef, …)")
    args = parser.parse_args(argv)
    rank, world = init_process_group()
    try:
        records = [json.loads(line) for line in Path(args.transitions).read_text().splitlines() if line.strip()]
        transitions = [t for t in map(from_export, records) if t is not None]
        load = json.loads(Path(args.load).read_text())
        if torch.cuda.is_available():
            load["device"] = "cuda"
        session = Session(lambda _: None)
        session.load(parse(LoadParams, load))
        options = json.loads(Path(args.train).read_text()) if args.train else {}
        result = train_all(session, transitions, options)
        if rank == 0:
            saved = session.save(parse(SaveParams, {"dir": args.out, "metrics": result}))
            print(
                json.dumps(
                    {
                        **result,
                        "checkpoint": saved["path"],
                        "worldSize": world,
                        "skippedWithoutTokenIds": len(records) - len(transitions),
                    }
                ),
                flush=True,
            )
        # Every rank leaves together: a rank that tore gloo down while rank 0 was still saving aborted
        # ("terminate called without an active exception", SIGABRT) on a busy 2-core CI machine.
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
