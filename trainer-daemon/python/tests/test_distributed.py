"""Data parallelism: torchrun with 2 gloo processes makes the same update as one process on the same batch (an odd
one, dr_grpo without maxResponseLength, several minibatches)."""

import json
import socket
import subprocess
import sys

import torch
from conftest import TINY, make_session, worker_env
from test_train import sampled_transitions

from lightning_trainer.params import TrainParams
from lightning_trainer.schema import parse


def test_two_process_gloo_update_equals_single_process(tmp_path):
    load = {"model": TINY, "adapter": {"kind": "full"}, "seed": 5, "optimizer": {"lr": 1e-3}}
    options = {"epochs": 2, "minibatch": 5, "microBatch": 3, "klCoef": 0.1, "lossType": "dr_grpo"}
    single = make_session(**{k: v for k, v in load.items() if k != "model"})
    transitions = sampled_transitions(single, count=9)
    (tmp_path / "load.json").write_text(json.dumps(load))
    (tmp_path / "train.json").write_text(json.dumps(options))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in transitions))

    # The environment torchrun gives each rank (torch 1.13's torchrun itself breaks on Python 3.11's IntFlag).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "lightning_trainer.distributed",
        "--load",
        str(tmp_path / "load.json"),
        "--transitions",
        str(tmp_path / "t.jsonl"),
        "--train",
        str(tmp_path / "train.json"),
        "--out",
        str(tmp_path / "ckpt"),
    ]
    ranks = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **worker_env(),
                "OMP_NUM_THREADS": "1",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
        )
        for rank in range(2)
    ]
    outputs = [process.communicate(timeout=180) for process in ranks]
    for process, (_, stderr) in zip(ranks, outputs):
        assert process.returncode == 0, stderr[-3000:]
    summary = json.loads(outputs[0][0].strip().splitlines()[-1])
    assert summary["worldSize"] == 2 and summary["step"] == 1 and outputs[1][0] == ""

    initial = {n: p.detach().clone() for n, p in single.policy.model.named_parameters()}
    expected = single.train(parse(TrainParams, {"transitions": transitions, **options}))
    assert abs(summary["loss"] - expected["loss"]) < 1e-5
    weights = torch.load(tmp_path / "ckpt" / "trainable.pt")
    # Equal up to float summation order (Adam divides by sqrt(v), which magnifies rounding on tiny gradients).
    for name, parameter in single.policy.model.named_parameters():
        change = (parameter.detach() - initial[name]).norm()
        assert (weights[name] - parameter.detach()).norm() <= 0.01 * change + 1e-7, name
