"""Policy updates on the tiny model: direction of the update, LoRA, gradient accumulation, checkpoints."""

import dataclasses
import json

import pytest
import torch
from conftest import make_session

from lightning_trainer.generate import NonFiniteError, Sampling, generate
from lightning_trainer.params import LoadParams, SaveParams, SftParams, TrainParams
from lightning_trainer.schema import BadParams, parse
from lightning_trainer.train import sequence_logprobs


def sampled_transitions(session, count=8, seed=0):
    policy = session.policy
    prompts = [policy.render_prompt([{"role": "user", "content": f"{i} plus {i + 1}"}], None) for i in range(count)]
    outputs = generate(policy, prompts, [Sampling(max_tokens=12, seed=seed + i) for i in range(count)])
    return [
        {"promptIds": p, "responseIds": o.ids, "logprobs": o.logprobs, "advantage": 1.0 if i % 2 == 0 else -1.0}
        for i, (p, o) in enumerate(zip(prompts, outputs))
    ]


def total_logprobs(session, transitions):
    result = sequence_logprobs(
        session.policy, [t["promptIds"] for t in transitions], [t["responseIds"] for t in transitions]
    )
    return (result.logprobs * result.valid).sum(dim=1).detach()


def train(session, transitions, **options):
    return session.train(parse(TrainParams, {"transitions": transitions, **options}))


def test_update_raises_positive_and_lowers_negative_advantage_responses():
    session = make_session(optimizer={"lr": 1e-3})
    transitions = sampled_transitions(session)
    before = total_logprobs(session, transitions)
    result = train(session, transitions, epochs=1)
    after = total_logprobs(session, transitions)
    assert result["step"] == 1 and result["tokens"] == sum(len(t["responseIds"]) for t in transitions)
    assert result["maxRatioDeviation"] < 1e-5  # behaviour logprobs came from the same weights
    for i in range(len(transitions)):
        if transitions[i]["advantage"] > 0:
            assert after[i] > before[i], f"positive-advantage response {i} did not gain probability"
        else:
            assert after[i] < before[i], f"negative-advantage response {i} did not lose probability"


def test_null_logprobs_are_recomputed_and_give_the_same_update():
    a, b = make_session(), make_session()
    with_logprobs = sampled_transitions(a)
    without = [{**t, "logprobs": None} for t in with_logprobs]
    train(a, with_logprobs)
    result = train(b, without)
    assert result["maxRatioDeviation"] < 1e-5
    for pa, pb in zip(a.policy.model.parameters(), b.policy.model.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6)


def test_gradient_accumulation_matches_one_big_micro_batch():
    """lossType dapo (the default) is exact under accumulation. (The entropy bonus is not: as in TRL, it is each
    micro-batch's mean entropy.)"""
    a, b = make_session(), make_session()
    transitions = sampled_transitions(a)
    train(a, transitions, microBatch=64, klCoef=0.1)
    train(b, transitions, microBatch=3, klCoef=0.1)
    for pa, pb in zip(a.policy.model.parameters(), b.policy.model.parameters()):
        assert torch.allclose(pa, pb, atol=1e-5)


def test_masked_tokens_carry_no_gradient():
    session = make_session()
    transitions = sampled_transitions(session, count=2)
    for t in transitions:
        t["mask"] = [0] * len(t["responseIds"])
    before = [p.detach().clone() for p in session.policy.model.parameters()]
    result = train(session, transitions)
    assert result["pgLoss"] == 0.0
    assert all(torch.equal(x, p) for x, p in zip(before, session.policy.model.parameters()))


def test_lora_trains_adapters_and_leaves_base_weights_untouched():
    session = make_session(adapter={"kind": "lora", "rank": 4, "alpha": 8, "trainNorms": False}, optimizer={"lr": 1e-2})
    named = dict(session.policy.model.named_parameters())
    base = {n: p.detach().clone() for n, p in named.items() if "lora_" not in n}
    adapters = {n: p.detach().clone() for n, p in named.items() if "lora_" in n}
    assert set(session.policy.trainable()) == set(adapters)
    transitions = sampled_transitions(session)
    before = total_logprobs(session, transitions)
    train(session, transitions)
    assert all(torch.equal(named[n], value) for n, value in base.items())
    assert any(not torch.equal(named[n], value) for n, value in adapters.items())
    assert not torch.allclose(total_logprobs(session, transitions), before)
    with session.policy.adapters_disabled():  # the reference policy is exactly the base model
        fresh = make_session(adapter={"kind": "lora", "rank": 4, "alpha": 8, "trainNorms": False})
        assert torch.allclose(total_logprobs(session, transitions), total_logprobs(fresh, transitions), atol=1e-5)


def test_kl_to_the_reference_is_zero_before_and_positive_after_updates():
    session = make_session(adapter={"kind": "lora", "rank": 4}, optimizer={"lr": 3e-3})
    transitions = sampled_transitions(session)
    first = train(session, transitions, klCoef=0.5, epochs=1)
    assert first["kl"] < 1e-8
    second = train(session, transitions, klCoef=0.5, epochs=1)
    assert second["kl"] > 1e-6


def test_with_kl_coef_0_the_kl_is_measured_only_when_asked_and_its_reference_forward_skipped_otherwise():
    session = make_session(adapter={"kind": "lora", "rank": 4}, optimizer={"lr": 3e-3})
    transitions = sampled_transitions(session)
    train(session, transitions, epochs=1)
    phases: dict = {}
    unmeasured = session.train(
        parse(TrainParams, {"transitions": transitions, "epochs": 1, "klSample": False}), phases=phases
    )
    assert "kl" not in unmeasured and "reference" not in phases  # no KL it never saw, no reference forward
    phases = {}
    measured = session.train(parse(TrainParams, {"transitions": transitions, "epochs": 1}), phases=phases)
    assert measured["kl"] > 1e-6 and phases["reference"] > 0  # after two updates the policy has moved
    # A KL term in the loss needs every row's reference: klSample does not turn it off.
    penalised = train(session, transitions, klCoef=0.1, klSample=False, epochs=1)
    assert penalised["kl"] > 1e-6


def test_checkpoint_round_trip(tmp_path):
    session = make_session(adapter={"kind": "lora", "rank": 4}, optimizer={"lr": 3e-3})
    transitions = sampled_transitions(session)
    train(session, transitions)
    saved = session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt"), "metrics": {"reward": 0.5}}))
    assert saved["bytes"] > 0
    assert json.loads((tmp_path / "ckpt" / "metrics.json").read_text()) == {"reward": 0.5}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind

    resumed = make_session(checkpoint=str(tmp_path / "ckpt"))  # model + adapter come from config.json
    assert resumed.step == 1
    assert torch.allclose(total_logprobs(resumed, transitions), total_logprobs(session, transitions), atol=1e-6)
    # the optimizer state came along: the next update is the same in both
    train(session, transitions)
    train(resumed, transitions)
    assert torch.allclose(total_logprobs(resumed, transitions), total_logprobs(session, transitions), atol=1e-5)

    session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))  # overwriting replaces it whole
    assert json.loads((tmp_path / "ckpt" / "metrics.json").read_text()) == {}


def test_a_checkpoint_is_on_disk_before_its_name_is(tmp_path, monkeypatch):
    """Every file and folder of a checkpoint is fsynced before the rename, and the parent folder after it."""
    import os

    from lightning_trainer import checkpoint

    synced = []
    real = os.fsync

    def recording(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    target = tmp_path / "step-1"
    checkpoint.write(str(target), {"w": torch.zeros(2)}, {}, {"step": 1}, {"loss": 0.5})
    *inside, parent = synced
    assert parent == str(tmp_path)
    assert {os.path.basename(p) for p in inside[:-1]} == {"trainable.pt", "optimizer.pt", "config.json", "metrics.json"}
    assert os.path.basename(inside[-1]).startswith(".step-1.tmp-"), "the folder last, before its rename"
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "metrics.json", "optimizer.pt", "trainable.pt"]


def test_a_checkpoint_written_over_keeps_the_previous_one_when_the_new_one_cannot_take_its_name(tmp_path, monkeypatch):
    from lightning_trainer import checkpoint

    target = tmp_path / "step-1"
    checkpoint.write(str(target), {"w": torch.zeros(2)}, {}, {"step": 1}, {"loss": 0.5})

    def failing(tmp, to):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoint, "durable_rename", failing)
    with pytest.raises(OSError):
        checkpoint.write(str(target), {"w": torch.ones(2)}, {}, {"step": 1}, {"loss": 0.1})
    assert json.loads((target / "metrics.json").read_text()) == {"loss": 0.5}, "the previous checkpoint, whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1"], "no temporary or old folder left"


def test_checkpoint_for_another_adapter_is_refused(tmp_path):
    session = make_session(adapter={"kind": "lora", "rank": 4})
    session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))
    with pytest.raises(ValueError, match="different model or adapter"):
        make_session(adapter={"kind": "full"}, checkpoint=str(tmp_path / "ckpt"))


def test_bad_params_name_the_field():
    with pytest.raises(BadParams, match=r"params.transitions\[0\].logprobs"):
        parse(
            TrainParams, {"transitions": [{"promptIds": [1], "responseIds": [2, 3], "logprobs": [0.1], "advantage": 1}]}
        )
    with pytest.raises(BadParams, match=r"params.adapter.rank must be integer"):
        parse(LoadParams, {"model": {"kind": "tiny"}, "adapter": {"kind": "lora", "rank": "8"}})
    with pytest.raises(BadParams, match=r"params.optimizer.learningRate is not a known field"):
        parse(LoadParams, {"model": {"kind": "tiny"}, "adapter": {"kind": "full"}, "optimizer": {"learningRate": 1}})


def test_a_non_finite_update_is_refused_and_leaves_weights_and_optimizer_state_unchanged():
    session = make_session(optimizer={"lr": 1e-3})
    good = sampled_transitions(session, count=4)
    train(session, good)  # optimizer state exists, so its restoration is checked too
    # a behaviour logprob of -1e30 makes the ratio inf: with a negative advantage the loss is inf
    bad = {**good[1], "logprobs": [-1e30] * len(good[1]["responseIds"]), "advantage": -1.0}
    weights = {n: p.detach().clone() for n, p in session.policy.model.named_parameters()}
    state = session.optimizer.state_dict()["state"]
    before = {k: {name: t.clone() for name, t in v.items()} for k, v in state.items()}
    with pytest.raises(NonFiniteError, match="non-finite update"):  # minibatch 1: the good one may apply first
        train(session, [good[0], bad], minibatch=1, epochs=2)
    for n, p in session.policy.model.named_parameters():
        assert torch.equal(p, weights[n]), f"{n} changed"
    after = session.optimizer.state_dict()["state"]
    assert after.keys() == before.keys()
    for k, v in after.items():
        assert v.keys() == before[k].keys()
        for name, value in v.items():  # exp_avg, exp_avg_sq and step
            assert torch.equal(value, before[k][name]), f"{k}.{name} changed"
    # Put back as tensors of their own (the snapshot is one buffer; the optimizer's state must not alias it).
    restored = [t for s in session.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    assert len({t.untyped_storage().data_ptr() for t in restored}) == len(restored)
    assert session.step == 1
    assert train(session, good)["step"] == 2


def test_an_sft_lr_holds_for_that_call_only_and_a_resumed_load_takes_the_lr_asked_for(tmp_path):
    session = make_session(optimizer={"lr": 3e-4})
    examples = [{"messages": [{"role": "user", "content": "1 plus 2"}], "completion": {"content": "3"}}]
    session.sft(parse(SftParams, {"examples": examples, "steps": 2, "batchSize": 1, "lr": 1e-3}))
    assert [group["lr"] for group in session.optimizer.param_groups] == [3e-4]
    saved = session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))
    asked = dataclasses.replace(
        session.load_params,
        checkpoint=saved["path"],
        optimizer=dataclasses.replace(session.load_params.optimizer, lr=1e-4),
    )
    session.load(asked)
    assert [group["lr"] for group in session.optimizer.param_groups] == [1e-4]
    session.load(parse(LoadParams, {"checkpoint": saved["path"]}))
    assert [group["lr"] for group in session.optimizer.param_groups] == [3e-4]


def test_kl_is_measured_also_when_its_coefficient_is_0_and_the_warm_start_is_the_reference():
    session = make_session()
    example = {"messages": [{"role": "user", "content": "hi"}], "completion": {"content": "ok"}}
    session.sft(parse(SftParams, {"examples": [example], "steps": 5}))
    transitions = sampled_transitions(session)
    first = train(session, transitions, epochs=1)
    assert first["kl"] < 1e-8  # the warm-started policy is RL's reference (not the random weights before it)
    second = train(session, transitions, epochs=1)
    assert second["kl"] > 1e-6
    session.close()
