"""Every lossType under torchrun (2 and 3 gloo ranks on CPU, replicated and FSDP-sharded; the tiny policy fully
fine-tuned, and a tiny Qwen2 built from its config with LoRA) on an odd batch makes the one-process update: the same
loss, metrics and weights within 1e-5. The batch has 9 transitions (no even split), prompts and responses of
different lengths, environment tokens (mask 0), a zero advantage and rows without behaviour logprobs; minibatches of
5 and micro-batches of 2 leave a one-row micro-batch (one rank runs a loss-free row; with 3 ranks every micro-batch
leaves a rank with none), and dr_grpo gets no maxResponseLength (every rank sees the whole batch's longest
response)."""

import pytest
import torch
from conftest import hf_model_dir, make_session
from test_ddp_worker import LOAD, DdpWorker

from lightning_trainer.generate import Sampling, generate
from lightning_trainer.params import TrainParams
from lightning_trainer.schema import parse

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
OPTIONS = {"epochs": 2, "minibatch": 5, "microBatch": 2, "klCoef": 0.1, "klBiasCorrection": True, "entropyCoef": 0.01}


def odd_batch(session, count=9) -> list[dict]:
    policy = session.policy
    prompts = [
        policy.render_prompt([{"role": "user", "content": f"{i} plus {i + 1}" + " and then" * (i % 4)}], None)
        for i in range(count)
    ]
    outputs = generate(policy, prompts, [Sampling(max_tokens=4 + 2 * i, seed=i) for i in range(count)])
    advantages = [1.5, -0.5, 0.0, -1.2, 0.8, 2.0, -0.3, 0.4, -1.0]
    batch = []
    for i, (prompt, output) in enumerate(zip(prompts, outputs)):
        t = {"promptIds": prompt, "responseIds": output.ids, "logprobs": output.logprobs, "advantage": advantages[i]}
        if i % 3 == 1 and len(output.ids) > 2:
            t["mask"] = [0 if k == 1 else 1 for k in range(len(output.ids))]  # an environment token
        if i % 4 == 2:
            t["logprobs"] = None  # recomputed by the update (split across the ranks)
        batch.append(t)
    assert len({len(t["promptIds"]) for t in batch}) > 1 and len({len(t["responseIds"]) for t in batch}) > 1
    return batch


def one_process(batch: list[dict], loss_type: str, load: dict) -> tuple[dict, dict]:
    session = make_session(**load)
    result = session.train(parse(TrainParams, {"transitions": batch, "lossType": loss_type, **OPTIONS}))
    return result, {n: p.detach().clone() for n, p in session.policy.trainable().items()}


def check_every_loss_type(tmp_path, load: dict, nproc: int, fsdp: bool) -> None:
    """Each loss type's update on `nproc` ranks against the one-process update of the same batch."""
    batch = odd_batch(make_session(**load))
    worker = DdpWorker(tmp_path / "ddp.log", nproc=nproc)
    results = {}
    try:
        for loss_type in LOSS_TYPES:
            worker.call("load", {**load, "fsdp": fsdp})
            results[loss_type] = worker.call("train", {"transitions": batch, "lossType": loss_type, **OPTIONS})
            worker.call("save", {"dir": str(tmp_path / loss_type)})
    finally:
        worker.close()
    assert worker.process.returncode == 0, worker.stderr()[-3000:]
    losses = set()
    for loss_type in LOSS_TYPES:
        expected, weights = one_process(batch, loss_type, load)
        result = results[loss_type]
        assert result["worldSize"] == nproc and result["tokens"] == expected["tokens"]
        for key in ("loss", "pgLoss", "kl", "entropy", "clipFraction", "maxRatioDeviation", "gradNorm"):
            assert abs(result[key] - expected[key]) < 1e-5, (loss_type, key, result[key], expected[key])
        saved = torch.load(tmp_path / loss_type / "trainable.pt")
        assert set(saved) == set(weights)
        off = {n: float((saved[n] - w).abs().max()) for n, w in weights.items() if (saved[n] - w).abs().max() > 1e-5}
        assert not off, (loss_type, off)
        losses.add(round(expected["loss"], 6))
    assert len(losses) == len(LOSS_TYPES)  # the four normalisations differ on this batch: each was tested


@pytest.mark.parametrize(
    ("nproc", "fsdp"),
    [(2, False), (2, True), (3, False), (3, True)],
    ids=["2-replicated", "2-fsdp", "3-replicated", "3-fsdp"],
)
def test_every_loss_type_on_several_ranks_makes_the_one_process_update_on_an_odd_batch(tmp_path, nproc, fsdp):
    check_every_loss_type(tmp_path, LOAD, nproc, fsdp)


@pytest.mark.parametrize("fsdp", [False, True], ids=["replicated", "fsdp"])
def test_every_loss_type_with_lora_on_a_hugging_face_model_makes_the_one_process_update(tmp_path, fsdp):
    qwen = {"kind": "hf", "name": hf_model_dir(tmp_path / "qwen"), "fromConfig": True}
    load = {**LOAD, "model": qwen, "adapter": {"kind": "lora", "rank": 4}, "optimizer": {"lr": 3e-3}}
    check_every_loss_type(tmp_path, load, 2, fsdp)
