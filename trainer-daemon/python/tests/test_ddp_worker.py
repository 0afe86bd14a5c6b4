"""The trainer worker under torchrun (2 gloo ranks on CPU): the protocol on rank 0, the same update as one process on
the whole batch, one checkpoint, serving from rank 0; a rank killed mid-update fails the worker naming the rank and
its host, and a new worker resumes from the checkpoint."""

import json
import os
import re
import signal
import subprocess
import sys

import torch
from conftest import TINY, http, make_session, worker_env
from test_train import sampled_transitions

from lightning_trainer.params import TrainParams
from lightning_trainer.schema import parse


class DdpWorker:
    """`python -m lightning_trainer.torchrun --standalone --nproc_per_node 2 -m lightning_trainer.ddp_worker`."""

    def __init__(self, log_path, nproc=2, python=sys.executable):
        self.log_path = log_path
        self.process = subprocess.Popen(
            [
                python,
                "-m",
                "lightning_trainer.torchrun",
                "--standalone",
                "--nproc_per_node",
                str(nproc),
                "-m",
                "lightning_trainer.ddp_worker",
            ],
            env={**worker_env(), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log_path, "w"),  # noqa: SIM115 (the worker's log, open while it runs)
            text=True,
            bufsize=1,
        )
        self.next_id = 0
        self.ready = self.line()

    def stderr(self) -> str:
        return open(self.log_path).read()

    def line(self) -> dict | None:
        raw = self.process.stdout.readline()
        return json.loads(raw) if raw else None

    def send(self, method: str, params=None) -> int:
        self.next_id += 1
        self.process.stdin.write(
            json.dumps({"type": "request", "id": self.next_id, "method": method, "params": params or {}}) + "\n"
        )
        return self.next_id

    def response(self, method: str, params=None) -> dict:
        request = self.send(method, params)
        while True:
            message = self.line()
            assert message is not None, f"worker exited: {self.stderr()[-3000:]}"
            if message["type"] == "response":
                assert message["id"] == request
                return message

    def call(self, method: str, params=None) -> dict:
        message = self.response(method, params)
        assert "error" not in message, message["error"]
        return message["result"]

    def call_error(self, method: str, params=None) -> dict:
        message = self.response(method, params)
        assert "error" in message, message
        return message["error"]

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


LOAD = {"model": TINY, "adapter": {"kind": "full"}, "seed": 5, "optimizer": {"lr": 1e-3}, "threads": 1}
# The two-rank update is the one-process update, up to summation order (test_ddp_loss_types.py: every lossType).
OPTIONS = {"epochs": 2, "minibatch": 8, "microBatch": 3, "klCoef": 0.1}


def test_torchrun_worker_makes_the_single_process_update_serves_from_rank_0_and_saves_once(tmp_path):
    single = make_session(**{k: v for k, v in LOAD.items() if k != "model"})
    transitions = sampled_transitions(single, count=7)  # odd: the ranks' slices of a micro-batch differ in size
    worker = DdpWorker(tmp_path / "ddp.log")
    try:
        placement = worker.ready["distributed"]
        assert placement["worldSize"] == 2 and placement["backend"] == "gloo"
        assert [r["rank"] for r in placement["ranks"]] == [0, 1] and all(r["host"] for r in placement["ranks"])
        worker.call("load", LOAD)
        result = worker.call("train", {"transitions": transitions, **OPTIONS})
        saved = worker.call("save", {"dir": str(tmp_path / "ckpt"), "metrics": result})
        url = worker.call("serve", {})["url"]
        status, _, body = http(
            url,
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": "1 plus 2"}], "max_tokens": 4},
        )
        assert status == 200, body
    finally:
        worker.close()
    assert worker.process.returncode == 0, worker.stderr()[-3000:]
    expected = single.train(parse(TrainParams, {"transitions": transitions, **OPTIONS}))
    assert result["worldSize"] == 2 and result["step"] == expected["step"] == 1
    assert result["tokens"] == expected["tokens"]
    assert abs(result["loss"] - expected["loss"]) < 1e-5 and abs(result["kl"] - expected["kl"]) < 1e-5
    assert saved["path"] == str(tmp_path / "ckpt") and sorted(os.listdir(tmp_path)) == ["ckpt", "ddp.log"]
    weights = torch.load(tmp_path / "ckpt" / "trainable.pt")
    reference = make_session(**{k: v for k, v in LOAD.items() if k != "model"})
    for name, parameter in single.policy.model.named_parameters():
        initial = dict(reference.policy.model.named_parameters())[name].detach()
        change = (parameter.detach() - initial).norm()
        # Equal up to float summation order (Adam divides by sqrt(v), which magnifies rounding on tiny gradients).
        assert (weights[name] - parameter.detach()).norm() <= 0.01 * change + 1e-7, name


def test_a_rank_killed_mid_update_fails_the_worker_naming_it_and_a_new_worker_resumes_from_the_checkpoint(tmp_path):
    transitions = sampled_transitions(make_session(**{k: v for k, v in LOAD.items() if k != "model"}), count=16)
    worker = DdpWorker(tmp_path / "first.log")
    try:
        worker.call("load", LOAD)
        worker.call("train", {"transitions": transitions, "epochs": 1, "minibatch": 16})
        worker.call("save", {"dir": str(tmp_path / "ckpt")})
        rank1 = next(r for r in worker.ready["distributed"]["ranks"] if r["rank"] == 1)
        # A long update (one optimizer step per pair of transitions): kill rank 1 once the first step is reported.
        request = worker.send("train", {"transitions": transitions, "epochs": 50, "minibatch": 2})
        first = worker.line()
        assert first["type"] == "event" and first["data"]["phase"] == "train", first
        os.kill(rank1["pid"], signal.SIGKILL)
        answers = []
        while (message := worker.line()) is not None:
            answers.append(message)
        assert not any(m.get("type") == "response" and m.get("id") == request and "result" in m for m in answers)
        assert worker.process.wait(timeout=120) != 0
        log = worker.stderr()
        # torchrun's own summary names the rank that died, its host and the signal.
        assert re.search(r"host\s*: \S+\n\s*rank\s*: 1 \(local_rank: 1\)\n\s*exitcode\s*: -9", log), log[-3000:]
        assert "Signal 9 (SIGKILL)" in log
    finally:
        worker.close()
    resumed = DdpWorker(tmp_path / "second.log")
    try:
        loaded = resumed.call("load", {"checkpoint": str(tmp_path / "ckpt"), "threads": 1})
        assert loaded["step"] == 1
        again = resumed.call("train", {"transitions": transitions, "epochs": 1, "minibatch": 16})
        assert again["step"] == 2 and again["worldSize"] == 2
    finally:
        resumed.close()
