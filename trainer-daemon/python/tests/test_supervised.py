"""Supervised updates by epochs and the held-out evaluation (`lightning train --algorithm sft`'s engine): an epoch
visits every example once; `evaluate` changes no weight and reports the loss and greedy exact match, which rise from
nothing to every example as the policy learns them — text and a tool call, on the tiny policy and with LoRA on a tiny
Qwen2 built from its config; an example longer than the context is refused by index."""

import pytest
import torch
from conftest import hf_model_dir, make_session

from lightning_trainer.params import EvaluateParams, SftParams
from lightning_trainer.schema import BadParams, parse

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
EXAMPLES = [
    {"messages": [{"role": "user", "content": "hi there"}], "completion": {"content": "hi"}},
    {"messages": [{"role": "user", "content": "what is 3 plus 4"}], "completion": {"content": "7"}},
    {
        "messages": [{"role": "user", "content": "add 1 and 2"}],
        "tools": [ADD],
        "completion": {
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}]
        },
    },
]


def _weights(session) -> dict:
    return {n: p.detach().clone() for n, p in session.policy.trainable().items()}


@pytest.mark.parametrize("kind", ["tiny", "hf-lora"])
def test_epochs_teach_the_examples_and_evaluate_reports_it_without_changing_a_weight(tmp_path, kind):
    if kind == "tiny":
        session = make_session(model_config={"dModel": 64, "layers": 2, "heads": 4, "context": 96}, seed=3)
        lr, epochs = 3e-3, 60
    else:
        qwen = {"kind": "hf", "name": hf_model_dir(tmp_path / "qwen"), "fromConfig": True}
        # A random base's logits are near-flat: its adapters need more steps to lift the demonstrations' tokens.
        session = make_session(adapter={"kind": "lora", "rank": 16}, model=qwen, seed=3)
        lr, epochs = 5e-3, 100
    evaluate = parse(EvaluateParams, {"examples": EXAMPLES})
    before_weights = _weights(session)
    before = session.evaluate(evaluate)
    assert all(torch.equal(before_weights[n], p) for n, p in _weights(session).items()), "evaluate trains nothing"
    assert (before["examples"], before["generated"], before["exact"], before["accuracy"]) == (3, 3, 0, 0.0)
    trained = session.sft(parse(SftParams, {"examples": EXAMPLES, "epochs": epochs, "batchSize": 2, "lr": lr}))
    assert trained["steps"] == epochs * 2, "an epoch is ⌈3 / 2⌉ steps: every example once"
    assert trained["tokens"] == epochs * before["tokens"], "each epoch trains on every completion token once"
    after = session.evaluate(evaluate)
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    assert after["exact"] == 3 and after["accuracy"] == 1.0, after
    only_first = session.evaluate(parse(EvaluateParams, {"examples": EXAMPLES, "generate": 1}))
    assert (only_first["generated"], only_first["accuracy"]) == (1, 1.0)
    assert abs(only_first["loss"] - after["loss"]) < 1e-6, "the loss covers every example whatever is generated"
    session.close()


def test_an_example_longer_than_the_context_is_refused_by_index_and_epochs_do_not_stop_early():
    session = make_session(model_config={"dModel": 32, "layers": 1, "heads": 2, "context": 24})
    long = {"messages": [{"role": "user", "content": "x" * 40}], "completion": {"content": "y"}}
    with pytest.raises(BadParams, match=r"params\.examples\[1\] is \d+ prompt \+ \d+ completion tokens, longer than"):
        session.sft(parse(SftParams, {"examples": [EXAMPLES[0], long], "epochs": 1}))
    with pytest.raises(BadParams, match=r"params\.examples\[0\] is"):
        session.evaluate(parse(EvaluateParams, {"examples": [long]}))
    with pytest.raises(BadParams, match="epochs and params.untilSampledAccuracy do not go together"):
        parse(SftParams, {"examples": EXAMPLES, "epochs": 1, "untilSampledAccuracy": {"threshold": 0.5}})
    session.close()
