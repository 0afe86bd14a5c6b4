"""FSDP under torchrun (2 gloo ranks on CPU, `load {fsdp: true}`): the sharded update equals the one-process update on
the whole batch, the checkpoint it writes equals the one-process one and loads in a one-process worker (and back
into a sharded one, optimizer state included), rank 0 serves the updated weights; torch without FSDP2 and the
one-process worker refuse it with a message naming what to do."""

import json
import os
import shutil

import pytest
import torch
from conftest import http, make_session
from test_ddp_worker import LOAD, OPTIONS, DdpWorker
from test_train import sampled_transitions

from lightning_trainer.params import TrainParams
from lightning_trainer.schema import parse
from lightning_trainer.session import StateError
from lightning_trainer.train import sequence_logprobs

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch 1.13: no FSDP2


def one_process(**load):
    return make_session(**{k: v for k, v in {**LOAD, **load}.items() if k != "model"})


def assert_close_to(actual: dict, expected: dict, initial: dict) -> None:
    """Equal up to float summation order (Adam divides by sqrt(v), which magnifies rounding on tiny gradients)."""
    assert set(actual) == set(expected)
    off = {}
    for name, value in expected.items():
        change = (value - initial[name]).norm()
        if (actual[name] - value).norm() > 0.01 * change + 1e-7:
            off[name] = float((actual[name] - value).norm() / change)
    assert not off, off


def served_logprobs(url: str) -> tuple[list[int], list[int], list[float]]:
    status, _, body = http(
        url,
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "3 plus 4"}],
            "max_tokens": 6,
            "temperature": 0,
            "logprobs": True,
            "return_token_ids": True,
        },
    )
    assert status == 200, body
    response = json.loads(body)
    choice = response["choices"][0]
    return response["prompt_token_ids"], choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]


def recomputed(session, prompt: list[int], response: list[int]) -> list[float]:
    result = sequence_logprobs(session.policy, [prompt], [response])
    return result.logprobs[0, -len(response) :].tolist()


def test_fsdp_update_and_checkpoint_equal_one_process_and_rank_0_serves_the_updated_weights(tmp_path):
    single = one_process()
    initial = {n: p.detach().clone() for n, p in single.policy.model.named_parameters()}
    transitions = sampled_transitions(single, count=7)  # odd: the ranks' slices of a micro-batch differ in size
    # Half of them without behaviour logprobs: the ranks recompute them in the same number of collective forwards.
    for t in transitions[::2]:
        t["logprobs"] = None
    second = sampled_transitions(single, count=6, seed=50)
    worker = DdpWorker(tmp_path / "fsdp.log")
    try:
        loaded = worker.call("load", {**LOAD, "fsdp": True})
        url = worker.call("serve", {})["url"]
        before = served_logprobs(url)
        result = worker.call("train", {"transitions": transitions, **OPTIONS})
        after = served_logprobs(url)
        worker.call("save", {"dir": str(tmp_path / "fsdp-ckpt"), "metrics": result})
        # Resume into the sharded worker from that checkpoint (weights and optimizer state), and update again.
        resumed = worker.call("load", {"checkpoint": str(tmp_path / "fsdp-ckpt"), "fsdp": True, "threads": 1})
        again = worker.call("train", {"transitions": second, **OPTIONS})
        worker.call("save", {"dir": str(tmp_path / "fsdp-ckpt-2")})
    finally:
        worker.close()
    assert worker.process.returncode == 0, worker.stderr()[-3000:]
    assert loaded["parameters"] == sum(p.numel() for p in single.policy.model.parameters())

    expected = single.train(parse(TrainParams, {"transitions": transitions, **OPTIONS}))
    assert result["worldSize"] == 2 and result["step"] == expected["step"] == 1
    assert abs(result["loss"] - expected["loss"]) < 1e-5 and abs(result["kl"] - expected["kl"]) < 1e-5
    single.save(parse_save(tmp_path / "single-ckpt"))
    sharded = torch.load(tmp_path / "fsdp-ckpt" / "trainable.pt")
    assert_close_to(sharded, {n: p.detach() for n, p in single.policy.model.named_parameters()}, initial)
    # The optimizer state in the one-process format: the same indices, groups and moments.
    ours, theirs = (torch.load(tmp_path / d / "optimizer.pt") for d in ("fsdp-ckpt", "single-ckpt"))
    assert sorted(ours["state"]) == sorted(theirs["state"]) == list(range(len(sharded)))
    assert [g["params"] for g in ours["param_groups"]] == [g["params"] for g in theirs["param_groups"]]
    for i, state in theirs["state"].items():
        assert float(ours["state"][i]["step"]) == float(state["step"]) == 2.0
        assert torch.allclose(ours["state"][i]["exp_avg"], state["exp_avg"], rtol=1e-3, atol=1e-8), i

    # Rank 0 served the weights of the update: the one-process policy after it gives the same logprobs.
    assert before[2] != after[2]
    assert max(abs(a - b) for a, b in zip(after[2], recomputed(single, after[0], after[1]))) < 1e-4

    # The FSDP checkpoint loads in a one-process worker; resuming from it there makes the sharded second update.
    restored = make_session(checkpoint=str(tmp_path / "fsdp-ckpt"), threads=1)
    assert restored.step == 1 and resumed["step"] == 1
    for name, parameter in restored.policy.model.named_parameters():
        assert torch.equal(parameter.detach(), sharded[name]), name
    start = {n: p.detach().clone() for n, p in restored.policy.model.named_parameters()}
    expected_again = restored.train(parse(TrainParams, {"transitions": second, **OPTIONS}))
    assert again["step"] == expected_again["step"] == 2
    assert_close_to(
        torch.load(tmp_path / "fsdp-ckpt-2" / "trainable.pt"),
        {n: p.detach() for n, p in restored.policy.model.named_parameters()},
        start,
    )


def test_fsdp_equals_ddp_with_lora(tmp_path):
    lora = {"adapter": {"kind": "lora", "rank": 4}, "optimizer": {"lr": 3e-3}}
    single = one_process(**lora)
    transitions = sampled_transitions(single, count=8)
    checkpoints = {}
    for mode in ("ddp", "fsdp"):
        worker = DdpWorker(tmp_path / f"{mode}.log")
        try:
            worker.call("load", {**LOAD, **lora, "fsdp": mode == "fsdp"})
            result = worker.call("train", {"transitions": transitions, **OPTIONS})
            worker.call("save", {"dir": str(tmp_path / mode)})
        finally:
            worker.close()
        assert worker.process.returncode == 0, worker.stderr()[-3000:]
        checkpoints[mode] = (result, torch.load(tmp_path / mode / "trainable.pt"))
    (ddp, ddp_weights), (sharded, fsdp_weights) = checkpoints["ddp"], checkpoints["fsdp"]
    assert abs(ddp["loss"] - sharded["loss"]) < 1e-5 and abs(ddp["kl"] - sharded["kl"]) < 1e-5
    initial = {n: p.detach() for n, p in single.policy.trainable().items()}
    assert_close_to(fsdp_weights, ddp_weights, initial)
    assert any("lora_" in n for n in fsdp_weights) and all(n in initial for n in fsdp_weights)


def parse_save(path):
    from lightning_trainer.params import SaveParams

    return parse(SaveParams, {"dir": str(path)})


def test_the_one_process_worker_refuses_fsdp():
    with pytest.raises(StateError, match=r"needs the torchrun worker \(lightning train --nproc-per-node N --fsdp\)"):
        one_process(fsdp=True)


def test_torch_without_fsdp2_refuses_it_naming_the_version_needed(tmp_path):
    assert shutil.which(SYSTEM_PYTHON), "the system Python (Debian's torch 1.13) is part of the test machine"
    worker = DdpWorker(tmp_path / "old.log", python=SYSTEM_PYTHON)
    try:
        assert worker.ready["torch"].startswith("1.")
        error = worker.call_error("load", {**LOAD, "fsdp": True})
        assert error["kind"] == "state"
        assert "FSDP (--fsdp) needs torch 2.6 or later" in error["message"]
        assert f"this worker's torch is {worker.ready['torch']}" in error["message"]
        # Still a working worker: the same load without fsdp trains data-parallel.
        worker.call("load", LOAD)
        assert (
            worker.call("train", {"transitions": sampled_transitions(one_process(), count=4), "epochs": 1})["worldSize"]
            == 2
        )
    finally:
        worker.close()
    assert worker.process.returncode == 0, worker.stderr()[-3000:]
    assert os.path.exists(tmp_path / "old.log")
